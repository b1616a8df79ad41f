"""The simulated payment gateway and the shop's side of it.

The shop sends the shopper to the gateway with a signed checkout request; the gateway
answers with a signed callback. Both signatures are HMAC-SHA256 with the shared secret
``PAYMENT_GATEWAY_SECRET``. The callback is the only thing that pays an order, and it
is idempotent: one Payment per gateway reference and per order.
"""

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import Order, Payment
from .services import OrderNotPayable, order_pay


class PaymentError(Exception):
    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def _secret() -> bytes:
    if not settings.PAYMENT_GATEWAY_SECRET:
        raise PaymentError(503, "payments_unavailable", "Payments are not configured (PAYMENT_GATEWAY_SECRET).")
    return settings.PAYMENT_GATEWAY_SECRET.encode()


def payment_sign(message: str) -> str:
    return hmac.new(_secret(), message.encode(), hashlib.sha256).hexdigest()


def payment_signature_check(message: str, signature: str | None) -> None:
    expected = payment_sign(message)
    if not signature or not hmac.compare_digest(expected, signature):
        raise PaymentError(400, "bad_signature", "The gateway signature is missing or wrong.")


# --- shop → gateway: the checkout request ------------------------------------------


@dataclass(frozen=True)
class Checkout:
    order_no: str
    amount: str
    gateway_ref: str

    def message(self) -> str:
        return f"checkout|{self.order_no}|{self.amount}|{self.gateway_ref}"

    def params(self) -> dict[str, str]:
        return {
            "order_no": self.order_no,
            "amount": self.amount,
            "ref": self.gateway_ref,
            "sig": payment_sign(self.message()),
        }


def checkout_start(*, order: Order, now=None) -> Checkout:
    """What the shop sends the gateway for a payable order (a fresh reference each time)."""
    now = now or timezone.now()
    if order.status != Order.Status.PENDING or order.pay_deadline <= now:
        raise PaymentError(409, "not_payable", "This order can no longer be paid.")
    return Checkout(order_no=order.order_no, amount=f"{order.amount:.2f}", gateway_ref=secrets.token_hex(16))


def checkout_verify(params) -> Checkout:
    """The gateway's check of a checkout request (wrong or missing signature: 400)."""
    checkout = Checkout(
        order_no=str(params.get("order_no", ""))[:40],
        amount=str(params.get("amount", ""))[:20],
        gateway_ref=str(params.get("ref", ""))[:64],
    )
    payment_signature_check(checkout.message(), params.get("sig"))
    return checkout


# --- gateway → shop: the callback -----------------------------------------------------


def callback_build(*, checkout: Checkout) -> dict[str, str]:
    """The gateway's signed notice that the shopper paid (form fields of the callback)."""
    payload = json.dumps(
        {
            "gateway_ref": checkout.gateway_ref,
            "order_no": checkout.order_no,
            "amount": checkout.amount,
            "status": "succeeded",
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return {"payload": payload, "signature": payment_sign(payload)}


@dataclass(frozen=True)
class Captured:
    payment: Payment
    created: bool  # False: a replayed callback, nothing new recorded


def payment_capture(*, payload: str, signature: str | None) -> Captured:
    """Verify a callback and pay its order, once.

    The signature is checked before anything is read or written. A replay of the same
    callback finds its Payment and changes nothing; a second, different payment for an
    already-paid order is refused (409), so an order is never paid twice.
    """
    payment_signature_check(payload, signature)
    try:
        data = json.loads(payload)
        gateway_ref, order_no = str(data["gateway_ref"]), str(data["order_no"])
        amount = Decimal(str(data["amount"]))
        succeeded = data["status"] == "succeeded"
    except (ValueError, KeyError, TypeError, InvalidOperation) as exc:
        raise PaymentError(400, "invalid_request", "The callback payload is malformed.") from exc
    if not succeeded:
        raise PaymentError(400, "invalid_request", "Only successful payments are notified.")

    existing = Payment.objects.filter(gateway_ref=gateway_ref).select_related("order").first()
    if existing is not None:
        if existing.order.order_no != order_no:
            raise PaymentError(400, "invalid_request", "This payment reference belongs to another order.")
        return Captured(existing, created=False)
    order = Order.objects.filter(order_no=order_no).first()
    if order is None:
        raise PaymentError(400, "unknown_order", "No such order.")
    if amount != order.amount:
        raise PaymentError(400, "amount_mismatch", "The amount paid differs from the order's amount.")
    try:
        with transaction.atomic():
            payment = Payment.objects.create(order=order, gateway_ref=gateway_ref, amount=amount)
            order_pay(order=order)
    except IntegrityError as exc:
        # The same callback racing itself (same reference): the other one recorded it.
        again = Payment.objects.filter(gateway_ref=gateway_ref).first()
        if again is not None:
            return Captured(again, created=False)
        raise PaymentError(409, "already_paid", "This order has already been paid.") from exc
    except OrderNotPayable as exc:
        raise PaymentError(409, "not_payable", "This order can no longer be paid (cancelled or too late).") from exc
    return Captured(payment, created=True)
