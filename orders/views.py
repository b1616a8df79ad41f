"""The shopper's orders page, pay (through the configured provider) and cancel; the
simulated provider's checkout page. Notifications arrive at django-payments'
``payments/process/<token>/`` (orders.simulated.SimulatedProvider.process_data)."""

import json
import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from core.throttles import throttle_page

from .models import Order, Payment
from .payments import PaymentError, payment_start, payments_unavailable
from .selectors import order_of_shopper
from .services import OrderNotCancellable, order_cancel
from .simulated import OUTCOMES, checkout_complete


@never_cache
@login_required
def my_orders(request):
    orders = list(
        Order.objects.filter(user=request.user)
        .select_related("activity")
        .prefetch_related("payments")
        .order_by("-created_at")[:100]
    )
    # A late or second payment given back: the shopper sees it was refunded.
    rows = [(order, [p for p in order.payments.all() if p.refund_reason]) for order in orders]
    return render(request, "orders/my_orders.html", {"rows": rows, "orders": orders, "now": timezone.now()})


def _own_order(request, order_no: str) -> Order:
    order = order_of_shopper(order_no=order_no, user_id=request.user.pk)
    if order is None:
        raise Http404("No such order.")
    return order


@require_POST
@login_required
@throttle_page("order-pay")
def order_pay_start(request, order_no: str):
    """Start a payment with the provider and send the shopper to its page."""
    order = _own_order(request, order_no)
    try:
        started = payment_start(order=order)
    except PaymentError as exc:
        if exc.status == 409:
            messages.error(request, _("Order %(no)s can no longer be paid.") % {"no": order.order_no})
            return redirect("my-orders")
        return render(request, "orders/gateway_error.html", {"error": exc}, status=exc.status)
    if started.payment is None:
        messages.info(request, _("Order %(no)s is already paid.") % {"no": order.order_no})
        return redirect("my-orders")
    return redirect(started.pay_url)


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


def _wants_json(request) -> bool:
    return request.headers.get("Accept", "").startswith("application/json")


# --- the simulated provider's checkout page (stands in for a third party's site) -------


@csrf_exempt  # the provider's own site; holding the checkout link is what lets one in
@never_cache
def simulated_checkout(request, token: str):
    """GET: the provider's payment page. POST ``outcome`` (a form, or JSON with
    ``Accept: application/json``): the provider notifies the shop of it."""
    payment = _simulated_payment(token)
    as_json = _wants_json(request)
    if payment is None:
        if as_json:
            return JsonResponse({"code": "not_found", "detail": "No such checkout."}, status=404)
        raise Http404("No such checkout.")
    if request.method == "GET":
        if not settings.PAYMENT_GATEWAY_SECRET:
            exc = payments_unavailable("The simulated provider has no secret (PAYMENT_GATEWAY_SECRET).")
            return render(request, "orders/gateway_error.html", {"error": exc}, status=503)
        return render(request, "orders/simulated_checkout.html", {"payment": payment})
    if request.method != "POST":
        return JsonResponse({"code": "method_not_allowed", "detail": "GET or POST."}, status=405)
    outcome = _outcome_of(request)
    try:
        if outcome is None:
            raise PaymentError(400, "invalid_request", 'Send {"outcome": "succeeded"} or {"outcome": "failed"}.')
        answer = checkout_complete(payment=payment, outcome=outcome)
    except PaymentError as exc:
        if as_json:
            return JsonResponse({"code": exc.code, "detail": exc.detail}, status=exc.status)
        return render(request, "orders/gateway_error.html", {"error": exc}, status=exc.status)
    if as_json:
        return JsonResponse(answer)
    payment.refresh_from_db()
    if payment.refund_reason:
        messages.warning(
            request,
            _("Order %(no)s could no longer take this payment: it was refunded.") % {"no": payment.order.order_no},
        )
        return redirect(payment.get_failure_url())
    if outcome == "failed":
        return redirect(payment.get_failure_url())
    return redirect(payment.get_success_url())


def _simulated_payment(token: str) -> Payment | None:
    try:
        uuid.UUID(token)  # a reference is a UUID; anything else (a NUL…) is simply not found
    except ValueError:
        return None
    return Payment.objects.filter(token=token, variant="simulated").select_related("order").first()


def _outcome_of(request) -> str | None:
    if request.content_type == "application/json":
        try:
            body = json.loads(request.body)
        except ValueError:
            return None
        outcome = body.get("outcome") if isinstance(body, dict) else None
    else:
        outcome = request.POST.get("outcome")
    return outcome if outcome in OUTCOMES else None
