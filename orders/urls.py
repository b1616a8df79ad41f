"""The orders' routes: their JSON API (mounted under /api/), the shopper's pages, and the
simulated gateway's checkout and callback."""

from django.urls import path

from . import apis, views

api_urlpatterns = [
    path("orders/", apis.OrderListApi.as_view(), name="order-list"),
    path("orders/<str:order_no>/", apis.OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<str:order_no>/pay", apis.OrderPayApi.as_view(), name="order-pay"),
    path("orders/<str:order_no>/cancel", apis.OrderCancelApi.as_view(), name="order-cancel"),
]

urlpatterns = [
    path("orders/", views.my_orders, name="my-orders"),
    path("orders/<str:order_no>/pay/", views.order_pay_start, name="order-pay-page"),
    path("orders/<str:order_no>/cancel/", views.order_cancel_view, name="order-cancel-page"),
    path("gateway/checkout/", views.gateway_checkout, name="gateway-checkout"),
    path("payments/callback/", views.payment_callback, name="payment-callback"),
]
