"""The shopper's orders page, pay (through the simulated gateway) and cancel; the
gateway's own pages and the shop's callback endpoint."""

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from core.throttles import throttle_page

from .models import Order
from .payments import PaymentError, callback_build, checkout_start, checkout_verify, payment_capture
from .selectors import order_of_shopper
from .services import OrderNotCancellable, order_cancel


@never_cache
@login_required
def my_orders(request):
    orders = list(Order.objects.filter(user=request.user).select_related("activity").order_by("-created_at")[:100])
    return render(request, "orders/my_orders.html", {"orders": orders, "now": timezone.now()})


def _own_order(request, order_no: str) -> Order:
    order = order_of_shopper(order_no=order_no, user_id=request.user.pk)
    if order is None:
        raise Http404("No such order.")
    return order


@require_POST
@login_required
@throttle_page("order-pay")
def order_pay_start(request, order_no: str):
    """Send the shopper to the gateway with a signed checkout request."""
    order = _own_order(request, order_no)
    try:
        checkout = checkout_start(order=order)
    except PaymentError as exc:
        messages.error(request, _("Order %(no)s can no longer be paid.") % {"no": order.order_no})
        return redirect("my-orders") if exc.status == 409 else _error(exc)
    return redirect(f"{reverse('gateway-checkout')}?{urlencode(checkout.params())}")


@require_POST
@login_required
@throttle_page("order-cancel")
def order_cancel_view(request, order_no: str):
    order = _own_order(request, order_no)
    try:
        order_cancel(order=order, reason="shopper")
    except OrderNotCancellable:
        messages.error(request, _("Order %(no)s cannot be cancelled: it is paid.") % {"no": order.order_no})
    else:
        messages.success(request, _("Order %(no)s is cancelled; the item is back on sale.") % {"no": order.order_no})
    return redirect("my-orders")


def _error(exc: PaymentError) -> JsonResponse:
    return JsonResponse({"code": exc.code, "detail": exc.detail}, status=exc.status)


# --- the simulated gateway (stands in for a third party's site) ------------------------


@never_cache
def gateway_checkout(request):
    """GET: the gateway's payment page. POST: the shopper confirms (or gives up); the
    gateway then hands the browser a signed callback to post to the shop."""
    params = request.POST if request.method == "POST" else request.GET
    try:
        checkout = checkout_verify(params)
    except PaymentError as exc:
        return render(request, "orders/gateway_error.html", {"error": exc}, status=exc.status)
    if request.method == "POST":
        if params.get("action") != "pay":
            return redirect("my-orders")
        callback = callback_build(checkout=checkout)
        return render(request, "orders/gateway_return.html", {"callback": callback})
    return render(request, "orders/gateway_checkout.html", {"checkout": checkout, "params": checkout.params()})


@csrf_exempt  # the gateway is another site; the HMAC signature is what authenticates it
@require_POST
def payment_callback(request):
    """The gateway's callback: a wrong or missing signature is 400 and changes nothing;
    a replay changes nothing either."""
    try:
        captured = payment_capture(payload=request.POST.get("payload", ""), signature=request.POST.get("signature"))
    except PaymentError as exc:
        return _error(exc)
    if request.headers.get("Accept", "").startswith("application/json"):
        return JsonResponse({"status": "paid", "order_no": captured.payment.order.order_no, "new": captured.created})
    if captured.created and request.user.is_authenticated:
        messages.success(request, _("Paid. Thank you!"))
    return redirect(f"{reverse('my-orders')}?paid={captured.payment.order.order_no}")
