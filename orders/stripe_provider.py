"""Stripe Checkout, through django-payments' StripeProviderV3 (PAYMENT_PROVIDER=stripe).

The library creates the checkout session the shopper pays on, and verifies every webhook
with the stripe package's own ``Webhook.construct_event``: the ``Stripe-Signature`` header
(``t=<time>,v1=<HMAC-SHA256 of "<time>.<body>" under the endpoint secret>``), at most five
minutes old. Its confirmation of a paid session sets the payment confirmed, which settles
it (orders.payments: ``_real_provider_confirmed`` → ``payment_settle``).

What this subclass adds: it always verifies (``secure_endpoint`` cannot be turned off) and
never under an empty secret (any HMAC under the empty key would pass); a refused webhook is
a 400 of the shop's shape, not the stripe exception's 500; and a paid session must be for
the payment it names, for its amount and currency, before the library confirms it.
"""

from decimal import Decimal
from typing import Any

import stripe
from payments import PaymentError as LibraryPaymentError
from payments.stripe import StripeProviderV3
from payments.stripe.providers import stripe_enabled_events, zero_decimal_currency

from .payments import PaymentError, payment_amount_check, payments_unavailable

SIGNATURE_HEADER = "Stripe-Signature"

# Starting a payment waits on Stripe on a web thread: a few seconds and one retry at most,
# not the package's 80 s and two retries (an outage answers 503 payments_unavailable soon).
stripe.max_network_retries = 1
stripe.default_http_client = stripe.new_default_http_client(timeout=10)


def bad_signature() -> PaymentError:
    return PaymentError(400, "bad_signature", f"The {SIGNATURE_HEADER} header is missing or does not match the body.")


class StripeProvider(StripeProviderV3):
    def __init__(self, api_key: str = "", endpoint_secret: str = "", **kwargs: Any) -> None:
        kwargs.pop("secure_endpoint", None)
        super().__init__(api_key=api_key, endpoint_secret=endpoint_secret, secure_endpoint=True, **kwargs)

    def configuration_missing(self) -> str:
        names = (("STRIPE_API_KEY", self.api_key), ("STRIPE_ENDPOINT_SECRET", self.endpoint_secret))
        return ", ".join(name for name, value in names if not value)

    def return_event_payload(self, request) -> Any:
        """The event, verified by the library (stripe.Webhook.construct_event)."""
        if not self.endpoint_secret:
            raise payments_unavailable("Stripe's webhook cannot be verified (STRIPE_ENDPOINT_SECRET).")
        if not request.headers.get(SIGNATURE_HEADER, "").isascii():
            raise bad_signature()  # a signature is hex: stripe's comparison would raise TypeError
        try:
            return super().return_event_payload(request)
        except (stripe.SignatureVerificationError, LibraryPaymentError) as exc:
            raise bad_signature() from exc
        except ValueError as exc:  # signed, but not JSON (or not UTF-8)
            raise PaymentError(400, "invalid_request", "The event is not a Stripe event.") from exc

    def process_data(self, payment, request):
        event = self.return_event_payload(request)
        if event.get("type") in stripe_enabled_events:
            session = event.get("data", {}).get("object") or {}
            if session.get("client_reference_id") != payment.token:
                raise PaymentError(400, "invalid_request", "The event is for another payment.")
            if session.get("payment_status") == "paid":
                self._amount_check(payment=payment, session=session)
            # Stored before the library confirms the payment: a refund of a late payment,
            # made while confirming, needs the session's payment_intent.
            payment.attrs.session = session
            payment.save(update_fields=["extra_data"])
        return super().process_data(payment, request)

    def _amount_check(self, *, payment, session) -> None:
        currency = str(session.get("currency") or "")
        factor = 1 if currency.lower() in zero_decimal_currency else 100
        try:
            amount = str(Decimal(int(session.get("amount_total"))) / factor)
        except (TypeError, ValueError):
            amount = ""
        payment_amount_check(payment=payment, amount=amount, currency=currency.upper())
