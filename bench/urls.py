from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .views import naive_purchase_view

urlpatterns = [
    path(
        "activities/<int:activity_id>/purchase-db",
        csrf_exempt(require_POST(naive_purchase_view)),
        name="bench-purchase-db",
    ),
]
