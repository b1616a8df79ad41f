"""Paying an order through a provider (django-payments), provider-agnostic.

``payment_start`` opens a Payment with the configured provider and answers where the
shopper pays; it never pays the order. Only a provider's verified notification does,
through ``payment_settle``: it records the money taken and then either pays the order
(once) or, when the order was cancelled, is past its deadline or was already paid by
another payment, refunds it through the provider. Each provider verifies its own
notifications (the simulated one: orders.simulated; Stripe: orders.stripe_provider) before
the payment is settled.

Only the configured provider (settings.PAYMENT_PROVIDER) is registered; one that cannot
be loaded or fails (package missing, its API unreachable, any error of its own) is 503
``payments_unavailable`` with ``Retry-After``, never a 500.
"""

import logging
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from payments import PaymentStatus, RedirectNeeded
from payments.core import BasicProvider, provider_factory
from payments.signals import status_changed

from core.errors import DATABASE_AWAY

from .models import Order, Payment
from .services.addresses import AddressRequired, order_address_attach
from .services.lifecycle import OrderNotPayable, order_pay

logger = logging.getLogger(__name__)


class PaymentError(Exception):
    def __init__(self, status: int, code: str, detail: str, *, retry_after: int | None = None):
        super().__init__(detail)
        self.status, self.code, self.detail, self.retry_after = status, code, detail, retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


def payments_unavailable(detail: str) -> PaymentError:
    return PaymentError(503, "payments_unavailable", detail, retry_after=settings.PAYMENT_RETRY_AFTER)


def provider_configured(variant: str) -> bool:
    """``variant`` is this shop's provider (the only one registered in PAYMENT_VARIANTS)."""
    return bool(variant) and variant == settings.PAYMENT_PROVIDER and variant in settings.PAYMENT_VARIANTS


def provider_get(variant: str) -> BasicProvider:
    """The provider of ``variant``: 503 when it is not the configured one, cannot be loaded
    (its package missing) or lacks its configuration, never a 500."""
    if not provider_configured(variant):
        raise payments_unavailable("Payments are not configured (PAYMENT_PROVIDER).")
    try:
        provider = provider_factory(variant)
    except Exception as exc:
        logger.warning("payments.provider_unavailable variant=%s error=%r", variant, exc)
        raise payments_unavailable(f"The payment provider {variant!r} cannot be loaded.") from exc
    missing = getattr(provider, "configuration_missing", lambda: "")()
    if missing:
        raise payments_unavailable(f"Payments are not configured ({missing}).")
    return provider


def provider_failed(*, variant: str, exc: Exception, payment: Payment | None = None) -> PaymentError:
    """A provider that raised (its API unreachable, an error of its SDK): logged in one line
    and answered 503. The database being away is not the provider's failure: re-raised."""
    if isinstance(exc, DATABASE_AWAY):
        raise exc
    logger.warning(
        "payments.provider_failed variant=%s payment=%s error=%r", variant, payment.pk if payment else "-", exc
    )
    return payments_unavailable(f"The payment provider {variant!r} is not answering; please try again in a moment.")


@dataclass(frozen=True)
class PaymentStarted:
    payment: Payment | None  # None: the order is already paid
    pay_url: str = ""


def payment_start(*, order: Order, now=None) -> PaymentStarted:
    """A fresh payment of a payable order with the configured provider, and where to pay it."""
    now = now or timezone.now()
    if order.status == Order.Status.PAID:
        return PaymentStarted(payment=None)
    if order.status != Order.Status.PENDING or order.pay_deadline <= now:
        raise PaymentError(409, "not_payable", "This order can no longer be paid (cancelled or too late).")
    variant = settings.PAYMENT_PROVIDER
    provider = provider_get(variant)
    payment = Payment.objects.create(
        order=order,
        variant=variant,
        currency=settings.PAYMENT_CURRENCY,
        total=order.amount,
        description=f"Order {order.order_no}",
    )
    try:
        provider.get_form(payment)
    except RedirectNeeded as redirect:
        return PaymentStarted(payment=payment, pay_url=str(redirect))
    except Exception as exc:
        failure = provider_failed(variant=variant, exc=exc, payment=payment)
        _payment_error_mark(payment=payment, message=f"provider failed: {exc!r}")
        raise failure from exc
    # A provider whose checkout is a form inside the shop's page: not supported here.
    _payment_error_mark(payment=payment, message="provider has no payment page to send the shopper to")
    raise payments_unavailable(f"The provider {variant!r} has no payment page to send the shopper to.")


def _payment_error_mark(*, payment: Payment, message: str) -> None:
    """A payment whose start failed: in error, never waiting (the order shows no payment).
    A provider that marked it itself (Stripe's on a refused session) keeps its mark."""
    Payment.objects.filter(pk=payment.pk, status__in=[PaymentStatus.WAITING, PaymentStatus.INPUT]).update(
        status=PaymentStatus.ERROR, message=message
    )


def payment_start_for_shopper(*, order: Order, now=None) -> PaymentStarted:
    """What the shopper's pay step does: refuse what cannot be paid, ask for the shipping
    address (409 ``address_required``), copy it onto the order, then start the payment."""
    now = now or timezone.now()
    if order.status == Order.Status.PENDING and order.pay_deadline > now:
        try:
            order_address_attach(order=order)
        except AddressRequired as exc:
            raise PaymentError(409, "address_required", str(exc)) from exc
    return payment_start(order=order, now=now)


def payment_amount_check(*, payment: Payment, amount: str, currency: str) -> None:
    """A notification must be for exactly the payment's amount and currency."""
    try:
        same_amount = Decimal(amount) == payment.total
    except ArithmeticError:
        same_amount = False
    if not same_amount:
        logger.warning("payments.amount_mismatch payment=%s notified=%r expected=%s", payment.pk, amount, payment.total)
        raise PaymentError(400, "amount_mismatch", "The amount notified differs from the payment's amount.")
    if currency != payment.currency:
        logger.warning(
            "payments.currency_mismatch payment=%s notified=%r expected=%s", payment.pk, currency, payment.currency
        )
        raise PaymentError(400, "currency_mismatch", "The currency notified differs from the payment's currency.")


def payment_settle(*, payment: Payment, transaction_id: str = "", now=None) -> Payment:
    """The provider took the money (a verified notification): record it and act once.

    Pays the order when it is still payable; otherwise (cancelled, past its deadline, or
    already paid by another payment) records why and refunds through the provider. A
    notification delivered again finds the payment settled and changes nothing.
    """
    now = now or timezone.now()
    with transaction.atomic():
        payment = Payment.objects.select_for_update().get(pk=payment.pk)
        if payment.settled_at is not None or payment.status not in (
            PaymentStatus.WAITING,
            PaymentStatus.INPUT,
            PaymentStatus.CONFIRMED,
        ):
            return payment
        order = Order.objects.select_for_update().get(pk=payment.order_id)
        payment.status = PaymentStatus.CONFIRMED
        payment.captured_amount = payment.total
        payment.transaction_id = transaction_id or payment.transaction_id
        payment.settled_at = now
        if order.status == Order.Status.PAID:
            payment.refund_reason = "duplicate"
        else:
            try:
                order_pay(order=order, now=now)
            except OrderNotPayable:
                payment.refund_reason = "late"
        payment.save(update_fields=["status", "captured_amount", "transaction_id", "settled_at", "refund_reason"])
    if payment.refund_reason:
        logger.info("payments.refund payment=%s order=%s reason=%s", payment.pk, order.order_no, payment.refund_reason)
        payment_refund(payment=payment)
    return payment


def payment_refund(*, payment: Payment) -> None:
    """Give a confirmed payment's money back through its provider. A provider that fails
    leaves it confirmed with its refund_reason: staff see it in the admin and retry."""
    try:
        payment.refund()
    except Exception:
        logger.exception("payments.refund_failed payment=%s", payment.pk)


def payment_fail(*, payment: Payment) -> Payment:
    """The provider says the shopper did not pay: a waiting payment is rejected."""
    Payment.objects.filter(pk=payment.pk, status__in=[PaymentStatus.WAITING, PaymentStatus.INPUT]).update(
        status=PaymentStatus.REJECTED
    )
    payment.refresh_from_db()
    return payment


def payment_status_of(payments) -> str:
    """What the order JSON calls its payment: succeeded (money kept) > refunded > pending > none."""
    kept = refunded = pending = False
    for payment in payments:
        if payment.status == PaymentStatus.CONFIRMED and not payment.refund_reason:
            kept = True
        elif payment.status == PaymentStatus.REFUNDED or payment.refund_reason:
            refunded = True
        elif payment.status in (PaymentStatus.WAITING, PaymentStatus.INPUT):
            pending = True
    return "succeeded" if kept else "refunded" if refunded else "pending" if pending else "none"


def _real_provider_confirmed(sender, instance: Payment, **kwargs) -> None:
    # Real backends (Stripe, PayPal) verify their webhooks themselves and then set the
    # status; the simulated provider calls payment_settle directly. The backend saves its
    # instance again afterwards: it must hold what settling wrote (settled_at, a refund),
    # not overwrite it.
    if instance.status == PaymentStatus.CONFIRMED and instance.settled_at is None and instance.variant != "simulated":
        payment_settle(payment=instance, transaction_id=instance.transaction_id)
        instance.refresh_from_db()


status_changed.connect(_real_provider_confirmed, sender=Payment, dispatch_uid="orders.payments.settle")
