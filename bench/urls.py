from django.urls import path

from .views import NaivePurchaseApi

urlpatterns = [
    path("activities/<int:activity_id>/purchase-db", NaivePurchaseApi.as_view(), name="bench-purchase-db"),
]
