from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .views import naive_purchase_view

# Served like the real purchase by config.handlers.PurchaseFastPath: the contrast is fair.
PURCHASE_DB_URL_NAME = "bench-purchase-db"

urlpatterns = [
    path(
        "activities/<int:activity_id>/purchase-db",
        csrf_exempt(require_POST(naive_purchase_view)),
        name=PURCHASE_DB_URL_NAME,
    ),
]
