"""The simulated payment provider: a stand-in gateway for development, tests and demos.

It takes no money. Its checkout page (the payment's ``pay_url``) offers "succeeded" and
"failed"; after "succeeded" it notifies the shop the way a real provider's webhook would:
a JSON body with the reference, outcome, amount, currency, a time and a transaction id,
signed with HMAC-SHA256 under ``PAYMENT_GATEWAY_SECRET`` (header ``X-Simulated-Signature``).
The notification is delivered synchronously, in the request that completed the
checkout, to the same verifier the notification URL (``payments/process/<token>/``)
runs. Refunds happen at once. Production refuses this provider unless
``PAYMENT_SIMULATED_ALLOWED`` (config/settings/production.py).
"""

import hashlib
import hmac
import json
import secrets
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from payments import PaymentStatus, RedirectNeeded
from payments.core import BasicProvider

from .models import Payment
from .payments import PaymentError, payment_amount_check, payment_fail, payment_settle, payments_unavailable

SIGNATURE_HEADER = "X-Simulated-Signature"
OUTCOMES = ("succeeded", "failed")


def _secret() -> bytes:
    if settings.PAYMENT_PROVIDER != "simulated":
        raise payments_unavailable("The simulated provider is not this shop's payment provider.")
    if not settings.PAYMENT_GATEWAY_SECRET:
        raise payments_unavailable("The simulated provider has no secret (PAYMENT_GATEWAY_SECRET).")
    return settings.PAYMENT_GATEWAY_SECRET.encode()


def notification_sign(body: bytes) -> str:
    return hmac.new(_secret(), body, hashlib.sha256).hexdigest()


def notification_build(*, payment: Payment, outcome: str, now: float | None = None) -> tuple[bytes, str]:
    """The provider's signed notification of an outcome: (body, signature)."""
    body = json.dumps(
        {
            "reference": payment.token,
            "outcome": outcome,
            "amount": f"{payment.total:.2f}",
            "currency": payment.currency,
            "timestamp": int(now if now is not None else time.time()),
            "transaction": payment.transaction_id or f"sim_{secrets.token_hex(8)}",
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    return body, notification_sign(body)


def notification_verify(*, body: bytes, signature: str | None, now: float | None = None) -> dict[str, Any]:
    """The signed body, checked: signature (compared as bytes), shape, and time window.

    The time is inside the signed body, so a notification replayed later is refused as
    stale and one replayed with another body fails its signature."""
    expected = notification_sign(body).encode()
    given = (signature or "").encode("utf-8", "surrogatepass")
    if not hmac.compare_digest(expected, given):
        raise PaymentError(400, "bad_signature", "The notification signature is missing or wrong.")
    try:
        data = json.loads(body)
        fields = {key: data[key] for key in ("reference", "outcome", "amount", "currency", "timestamp", "transaction")}
        stamp = int(fields["timestamp"])
    except (ValueError, KeyError, TypeError) as exc:
        raise PaymentError(400, "invalid_request", "The notification body is malformed.") from exc
    if fields["outcome"] not in OUTCOMES or not all(
        isinstance(fields[key], str) for key in ("reference", "amount", "currency", "transaction")
    ):
        raise PaymentError(400, "invalid_request", "The notification body is malformed.")
    now = now if now is not None else time.time()
    if abs(now - stamp) > settings.PAYMENT_NOTIFICATION_WINDOW:
        raise PaymentError(400, "stale_notification", "The notification is too old (or from the future).")
    return fields


def notification_receive(*, payment: Payment, body: bytes, signature: str | None) -> dict[str, str]:
    """The shop's side: verify a notification of ``payment`` and act on it. Answers what
    the acknowledgement says; a PaymentError is a refusal (nothing changed)."""
    fields = notification_verify(body=body, signature=signature)
    if fields["reference"] != payment.token:
        raise PaymentError(400, "invalid_request", "The notification is for another payment.")
    payment_amount_check(payment=payment, amount=fields["amount"], currency=fields["currency"])
    if fields["outcome"] == "failed":
        payment = payment_fail(payment=payment)
    else:
        payment = payment_settle(payment=payment, transaction_id=fields["transaction"])
    return {"status": payment.status, "reference": payment.token}


def checkout_complete(*, payment: Payment, outcome: str) -> dict[str, str]:
    """The shopper chose ``outcome`` on the provider's page: the provider notifies the shop."""
    _secret()  # no secret: 503 before anything happens
    if payment.status in (PaymentStatus.REJECTED, PaymentStatus.ERROR) and outcome == "succeeded":
        raise PaymentError(409, "checkout_closed", "This checkout has failed; start a new payment from the shop.")
    if payment.status == PaymentStatus.REFUNDED or (outcome == "failed" and payment.settled_at is not None):
        return {"outcome": outcome}  # nothing more to tell the shop about this checkout
    body, signature = notification_build(payment=payment, outcome=outcome)
    notification_receive(payment=payment, body=body, signature=signature)
    return {"outcome": outcome}


class SimulatedProvider(BasicProvider):
    """django-payments' provider interface for the simulated gateway."""

    def configuration_missing(self) -> str:
        return "" if settings.PAYMENT_GATEWAY_SECRET else "PAYMENT_GATEWAY_SECRET"

    def get_form(self, payment, data=None):
        raise RedirectNeeded(reverse("simulated-checkout", kwargs={"token": payment.token}))

    def get_token_from_request(self, payment, request) -> str:
        try:
            return str(json.loads(request.body)["reference"])
        except (ValueError, KeyError, TypeError):
            return ""

    def process_data(self, payment, request: HttpRequest):
        """The notification URL: a refused notification is 4xx JSON; an accepted one 200,
        also when it was late or a second payment (recorded and refunded)."""
        if request.method != "POST":
            return JsonResponse({"code": "method_not_allowed", "detail": "POST a notification."}, status=405)
        try:
            answer = notification_receive(
                payment=payment, body=request.body, signature=request.headers.get(SIGNATURE_HEADER)
            )
        except PaymentError as exc:
            return JsonResponse({"code": exc.code, "detail": exc.detail}, status=exc.status, headers=exc.headers())
        return JsonResponse(answer)

    def refund(self, payment, amount=None):
        return amount or payment.captured_amount

    def capture(self, payment, amount=None):
        return amount or payment.total

    def release(self, payment):
        return None
