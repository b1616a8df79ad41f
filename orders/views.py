"""The shopper's orders page, an order's page, the shipping address, pay (through the
configured provider, after the address) and cancel (after a confirmation); the
simulated provider's checkout page; the providers' notification URLs,
``payments/process/<token>/`` (a payment's: the simulated provider's) and
``payments/process/<variant>/`` (a provider's webhook: Stripe's), which hand the request
to the configured provider's own django-payments code."""

import json
import uuid
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from payments import PaymentError as LibraryPaymentError
from payments import PaymentStatus

from core.clock import shop_time
from core.throttles import throttle_page

from .forms import ShippingAddressForm
from .models import Order, Payment, address_lines
from .payments import (
    PaymentError,
    payment_start_for_shopper,
    payments_unavailable,
    provider_configured,
    provider_failed,
    provider_get,
)
from .selectors import address_of, order_of_shopper, order_page_of_shopper, order_timeline, orders_of_shopper
from .services.addresses import address_save
from .services.lifecycle import OrderNotCancellable, order_cancel
from .simulated import OUTCOMES, checkout_complete


def _refunds(order: Order) -> list[Payment]:
    # A late or second payment given back: the shopper sees it was refunded.
    return [p for p in order.payments.all() if p.refund_reason]


# What became of one attempt to pay, as the order's timeline tells it.
PAYMENT_OUTCOMES = {
    PaymentStatus.CONFIRMED: "accepted",
    PaymentStatus.REFUNDED: "accepted",
    PaymentStatus.REJECTED: "failed",
    PaymentStatus.ERROR: "failed",
}


def _payment_return_message(request) -> None:
    """Back from the provider (Payment.get_success_url / get_failure_url: ``?paid=`` or
    ``?failed=`` and the order's number): say what happened, as the shop's records tell it,
    never as the URL claims. Someone else's order or a made-up number says nothing."""
    for param in ("paid", "failed"):
        number = request.GET.get(param)
        order = order_of_shopper(order_no=number, user_id=request.user.pk) if number else None
        if order is None:
            continue
        values = {"no": order.order_no}
        if order.status == Order.Status.PAID:
            messages.success(request, _("Order %(no)s is paid. Thank you!") % values)
        elif order.status != Order.Status.PENDING:
            messages.warning(request, _("Order %(no)s is no longer waiting for payment.") % values)
        elif param == "failed":
            values["deadline"] = shop_time(order.pay_deadline)
            messages.error(
                request,
                _(
                    "The payment for order %(no)s did not go through: nothing was paid. "
                    "You can try again until %(deadline)s."
                )
                % values,
            )
        else:
            messages.info(request, _("Order %(no)s: the payment is being confirmed.") % values)
        return


@never_cache
@login_required
def my_orders(request):
    _payment_return_message(request)
    orders = orders_of_shopper(user_id=request.user.pk)
    rows = [(order, _refunds(order)) for order in orders]
    context = {"rows": rows, "orders": orders, "now": timezone.now(), "address": address_of(user_id=request.user.pk)}
    return render(request, "orders/my_orders.html", context)


@never_cache
@login_required
def order_page(request, order_no: str):
    """One order: what it is, where it goes, what happened to it and what can be done."""
    order = order_page_of_shopper(order_no=order_no, user_id=request.user.pk)
    if order is None:
        raise Http404("No such order.")
    now = timezone.now()
    context = {
        "order": order,
        "refunded": _refunds(order),
        "timeline": _with_outcomes(order_timeline(order=order)),
        "payable": order.status == Order.Status.PENDING and order.pay_deadline > now,
        # Before payment the order has no copy yet: show where it would go.
        "address": order.shipping_lines or (None if order.status != Order.Status.PENDING else _current(request)),
        "now": now,
    }
    return render(request, "orders/order_page.html", context)


def _with_outcomes(timeline: list[dict]) -> list[dict]:
    """Each attempt to pay numbered, with its outcome (started, accepted, failed): three
    failed attempts read as three failures, not as three "Payment started"."""
    attempt = 0
    for event in timeline:
        if event["kind"] == "payment_started":
            attempt += 1
            event["attempt"] = attempt
            event["outcome"] = PAYMENT_OUTCOMES.get(event["payment"].status, "started")
    return timeline


def _current(request) -> list[str] | None:
    address = address_of(user_id=request.user.pk)
    if address is None:
        return None
    return address_lines(address.snapshot())


def _safe_next(request, default: str) -> str:
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if wanted and url_has_allowed_host_and_scheme(wanted, {request.get_host()}, require_https=request.is_secure()):
        return wanted
    return default


@never_cache
@login_required
def address_edit(request):
    """The shopper's shipping address; after saving, back to ``?next=`` (the order being paid)."""
    address = address_of(user_id=request.user.pk)
    next_url = _safe_next(request, reverse("my-orders"))
    if request.method == "POST":
        form = ShippingAddressForm(request.POST, instance=address)
        if form.is_valid():
            address_save(user_id=request.user.pk, fields=form.cleaned_data)
            messages.success(request, _("Your shipping address is saved."))
            return redirect(next_url)
        status = 400
    else:
        form = ShippingAddressForm(instance=address)
        status = 200
    return render(
        request, "orders/address_form.html", {"form": form, "next": next_url, "existing": address}, status=status
    )


def _own_order(request, order_no: str) -> Order:
    order = order_of_shopper(order_no=order_no, user_id=request.user.pk)
    if order is None:
        raise Http404("No such order.")
    return order


@require_POST
@login_required
@throttle_page("order-pay")
def order_pay_start(request, order_no: str):
    """Start a payment with the provider and send the shopper to its page; a shopper
    without a shipping address is sent to the address form first, then to the order."""
    order = _own_order(request, order_no)
    try:
        started = payment_start_for_shopper(order=order)
    except PaymentError as exc:
        if exc.code == "address_required":
            messages.info(request, _("Where should we deliver it? Add your shipping address, then pay."))
            back = reverse("order-page", args=[order.order_no])
            return redirect(f"{reverse('shipping-address')}?{urlencode({'next': back})}")
        if exc.status == 409:
            messages.error(request, _("Order %(no)s can no longer be paid.") % {"no": order.order_no})
            return redirect("order-page", order.order_no)
        return _gateway_error(request, exc)
    if started.payment is None:
        messages.info(request, _("Order %(no)s is already paid.") % {"no": order.order_no})
        return redirect("order-page", order.order_no)
    return redirect(started.pay_url)


@never_cache
@login_required
@throttle_page("order-cancel")
def order_cancel_view(request, order_no: str):
    """GET: the confirmation (what is given up, and a way back). POST: cancel."""
    order = _own_order(request, order_no)
    if request.method == "GET":
        cancellable = order.status == Order.Status.PENDING
        return render(request, "orders/cancel_confirm.html", {"order": order, "cancellable": cancellable})
    if request.method != "POST":
        return HttpResponseNotAllowed(["GET", "POST"])
    try:
        order_cancel(order=order, reason="shopper")
    except OrderNotCancellable:
        messages.error(request, _("Order %(no)s cannot be cancelled: it is paid.") % {"no": order.order_no})
    else:
        messages.success(request, _("Order %(no)s is cancelled; the item is back on sale.") % {"no": order.order_no})
    return redirect("order-page", order.order_no)


def _gateway_error(request, exc: PaymentError) -> HttpResponse:
    """The page for a payment that cannot go on (no provider, the provider failing)."""
    response = render(request, "orders/gateway_error.html", {"error": exc}, status=exc.status)
    for name, value in exc.headers().items():
        response[name] = value
    return response


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
            return _gateway_error(request, exc)
        return render(request, "orders/simulated_checkout.html", _checkout_context(payment))
    if request.method != "POST":
        return JsonResponse({"code": "method_not_allowed", "detail": "GET or POST."}, status=405)
    outcome = _outcome_of(request)
    try:
        if outcome is None:
            raise PaymentError(400, "invalid_request", 'Send {"outcome": "succeeded"} or {"outcome": "failed"}.')
        answer = checkout_complete(payment=payment, outcome=outcome)
    except PaymentError as exc:
        if as_json:
            return _payment_error_json(exc)
        return _gateway_error(request, exc)
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


def _checkout_context(payment: Payment) -> dict:
    """The provider's page offers to pay only what the shop would keep: a waiting payment
    of an order still pending and within its deadline."""
    order = payment.order
    if order.status == Order.Status.PAID:
        closed = _("This order is already paid.")
    elif order.status == Order.Status.CANCELLED:
        closed = _("This order is cancelled: there is nothing to pay.")
    elif order.pay_deadline <= timezone.now():
        closed = _("The time to pay this order is up.")
    elif payment.status != "waiting":
        closed = _("This checkout is closed.")
    else:
        closed = ""
    return {"payment": payment, "order": order, "closed": closed}


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


# --- the providers' notifications (django-payments' process URLs) ---------------------


def _payment_error_json(exc: PaymentError) -> JsonResponse:
    return JsonResponse({"code": exc.code, "detail": exc.detail}, status=exc.status, headers=exc.headers())


def _not_found(detail: str) -> JsonResponse:
    return JsonResponse({"code": "not_found", "detail": detail}, status=404)


@csrf_exempt  # the provider's server posts here; its signature is what lets it in
@never_cache
def payment_notification(request, token: uuid.UUID):
    """``payments/process/<token>/``: a notification about one payment, for its provider."""
    payment = Payment.objects.filter(token=str(token)).first()
    if payment is None:
        return _not_found("No such payment.")
    return _provider_answer(request, variant=payment.variant, payment=payment)


@csrf_exempt
@never_cache
def provider_webhook(request, variant: str):
    """``payments/process/<variant>/``: the configured provider's webhook (Stripe's). Any
    other variant is not here: 404, whatever the request."""
    if not provider_configured(variant):
        return _not_found(f"No payment provider {variant!r} here.")
    return _provider_answer(request, variant=variant, payment=None)


def _provider_answer(request, *, variant: str, payment: Payment | None) -> HttpResponse:
    """The provider verifies the request and moves the payment (its own django-payments
    code), in one transaction: a refusal (4xx) or a failure (503) changes nothing."""
    try:
        provider = provider_get(variant)
        with transaction.atomic():
            if payment is None:
                token = provider.get_token_from_request(payment=None, request=request)
                payment = Payment.objects.filter(token=str(token or ""), variant=variant).first()
                if payment is None:
                    return _not_found("No such payment.")
            return provider.process_data(payment, request)
    except PaymentError as exc:
        return _payment_error_json(exc)
    except LibraryPaymentError as exc:  # the library refused the request (a field missing…)
        status = exc.code if isinstance(exc.code, int) and 400 <= exc.code < 500 else 400
        return JsonResponse({"code": "invalid_request", "detail": str(exc)}, status=status)
    except Exception as exc:
        return _payment_error_json(provider_failed(variant=variant, exc=exc, payment=payment))
