"""The orders' routes: their JSON API (mounted under /api/), the shopper's pages, the
providers' notification URLs (django-payments) and the simulated provider's checkout."""

from django.conf import settings
from django.urls import path, re_path

from . import apis, views

api_urlpatterns = [
    path("me/address", apis.ShippingAddressApi.as_view(), name="shipping-address-api"),
    path("orders/", apis.OrderListApi.as_view(), name="order-list"),
    path("orders/<str:order_no>/", apis.OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<str:order_no>/pay", apis.OrderPayApi.as_view(), name="order-pay"),
    path("orders/<str:order_no>/cancel", apis.OrderCancelApi.as_view(), name="order-cancel"),
]

urlpatterns = [
    path("orders/", views.my_orders, name="my-orders"),
    # Before <order_no>/: "address" is no order number (they start with "A<activity>-").
    path("orders/address/", views.address_edit, name="shipping-address"),
    path("orders/<str:order_no>/", views.order_page, name="order-page"),
    path("orders/<str:order_no>/pay/", views.order_pay_start, name="order-pay-page"),
    path("orders/<str:order_no>/cancel/", views.order_cancel_view, name="order-cancel-page"),
]
# The simulated provider's page exists only where it is the provider.
if settings.PAYMENT_PROVIDER == "simulated":
    urlpatterns.append(path("payments/simulated/<str:token>/", views.simulated_checkout, name="simulated-checkout"))

# Not pages: the providers' servers post here, never under a language prefix.
provider_urlpatterns = [
    # django-payments' two notification URLs, under its names (Payment.get_process_url),
    # answered by the configured provider only: a payment's, then a provider's webhook.
    path("payments/process/<uuid:token>/", views.payment_notification, name="process_payment"),
    re_path(r"^payments/process/(?P<variant>[a-z-]+)/$", views.provider_webhook, name="static_process_payment"),
]
