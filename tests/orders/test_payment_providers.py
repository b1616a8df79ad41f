"""Only the configured payment provider exists, and a failing one is 503, never 500.

Stripe (django-payments' StripeProviderV3) is configured here with made-up keys: its API
is not reachable from the tests, so starting a payment meets a real connection error (or,
with a network, a refused key), and its webhooks are signed here with the endpoint secret
the way Stripe signs them (``Stripe-Signature: t=<time>,v1=<HMAC-SHA256 of "<time>.<body>">``)
and verified by the stripe library's own ``Webhook.construct_event``."""

import hashlib
import hmac
import json
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import payments.core
import pytest
from django.test import Client
from payments import PaymentStatus
from rest_framework.test import APIClient

from config.settings.base import payment_variants
from orders.models import Order, Payment
from orders.services.creation import order_create_direct
from orders.services.lifecycle import order_cancel
from orders.simulated import SimulatedProvider
from tests.factories import UserFactory, make_activity
from tests.orders.addresses import give_address

pytestmark = pytest.mark.django_db

STRIPE_API_KEY = "sk_test_made_up_for_the_tests"
STRIPE_ENDPOINT_SECRET = "whsec_made_up_for_the_tests"


@pytest.fixture
def bought():
    """A shopper (with a shipping address) with a pending order, bought on the database path
    (payments do not care which path sold the unit)."""
    activity = make_activity(stock=5, warm=False, db_reserve=5)
    user = UserFactory()
    give_address(user)
    order_create_direct(activity_id=activity.pk, user_id=user.pk, quantity=1)
    return user, Order.objects.get(activity=activity, user=user)


@pytest.fixture
def fresh_providers():
    """django-payments keeps one provider per variant name: each test builds its own."""
    payments.core.PROVIDER_CACHE.clear()
    yield
    payments.core.PROVIDER_CACHE.clear()


@pytest.fixture
def stripe_shop(settings, monkeypatch, fresh_providers):
    """The shop as PAYMENT_PROVIDER=stripe with (made-up) keys in the environment sets it up."""
    monkeypatch.setenv("STRIPE_API_KEY", STRIPE_API_KEY)
    monkeypatch.setenv("STRIPE_ENDPOINT_SECRET", STRIPE_ENDPOINT_SECRET)
    settings.PAYMENT_PROVIDER = "stripe"
    settings.PAYMENT_VARIANTS = payment_variants("stripe")


def api_of(user) -> APIClient:
    api = APIClient()
    api.raise_request_exception = False  # a 500 is an answer to look at, not an exception here
    api.force_authenticate(user)
    return api


def page_client_of(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def tracebacks(caplog) -> list[logging.LogRecord]:
    """Logged tracebacks and server errors (Django logs every 5xx answer, a 503 without one)."""
    return [
        record
        for record in caplog.records
        if record.exc_info or record.getMessage().startswith("Internal Server Error")
    ]


def assert_payments_unavailable(response) -> None:
    assert response.status_code == 503, response.content
    assert response.json()["code"] == "payments_unavailable"
    assert int(response["Retry-After"]) > 0


# --- only the configured provider ----------------------------------------------------


@pytest.mark.parametrize("variant", ["stripe", "paypal", "dummy"])
def test_a_variant_that_is_not_configured_is_404_without_a_traceback(variant, caplog):
    """The test settings configure the simulated provider only."""
    caplog.set_level(logging.INFO)
    client = Client(raise_request_exception=False)
    response = client.post(
        f"/payments/process/{variant}/", b'{"id": "evt_1"}', content_type="application/json", HTTP_STRIPE_SIGNATURE="x"
    )
    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"
    assert not tracebacks(caplog)


def test_without_a_provider_no_variant_exists(settings, fresh_providers, caplog):
    settings.PAYMENT_PROVIDER = ""
    settings.PAYMENT_VARIANTS = {}
    client = Client(raise_request_exception=False)
    for variant in ("simulated", "stripe"):
        response = client.post(f"/payments/process/{variant}/", b"{}", content_type="application/json")
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert not tracebacks(caplog)


# --- a failing provider: 503, never 500 ----------------------------------------------


def test_stripe_unreachable_pay_is_503_on_the_api_and_the_page(bought, stripe_shop, caplog):
    user, order = bought
    assert_payments_unavailable(api_of(user).post(f"/api/orders/{order.order_no}/pay"))
    page = page_client_of(user).post(f"/orders/{order.order_no}/pay/")
    assert page.status_code == 503 and int(page["Retry-After"]) > 0
    assert b"Payment unavailable" in page.content
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING and order.paid_at is None
    # Each attempt left a payment in error, none waiting: the order is still "not paid".
    assert set(Payment.objects.filter(order=order).values_list("status", flat=True)) == {PaymentStatus.ERROR}
    assert api_of(user).get(f"/api/orders/{order.order_no}/").json()["payment_status"] == "none"
    assert not tracebacks(caplog)


def test_a_provider_that_raises_is_503(bought, monkeypatch, fresh_providers):
    user, order = bought

    def broken(self, payment, data=None):
        raise RuntimeError("the provider's SDK fell over")

    monkeypatch.setattr(SimulatedProvider, "get_form", broken)
    assert_payments_unavailable(api_of(user).post(f"/api/orders/{order.order_no}/pay"))
    page = page_client_of(user).post(f"/orders/{order.order_no}/pay/")
    assert page.status_code == 503 and b"Payment unavailable" in page.content
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING


def test_the_stripe_package_missing_is_503(bought, stripe_shop, settings, monkeypatch):
    """An import failure of the provider (here: ``import stripe`` fails) on pay and on its webhook."""
    user, order = bought
    monkeypatch.setitem(sys.modules, "stripe", None)  # `import stripe` now raises ImportError
    provider_module = settings.PAYMENT_VARIANTS["stripe"][0].rpartition(".")[0]
    for name in [name for name in sys.modules if name.startswith("payments.stripe") or name == provider_module]:
        monkeypatch.delitem(sys.modules, name)
    assert_payments_unavailable(api_of(user).post(f"/api/orders/{order.order_no}/pay"))
    page = page_client_of(user).post(f"/orders/{order.order_no}/pay/")
    assert page.status_code == 503
    webhook = Client(raise_request_exception=False).post(
        "/payments/process/stripe/", b"{}", content_type="application/json", HTTP_STRIPE_SIGNATURE="t=1,v1=00"
    )
    assert_payments_unavailable(webhook)
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING


# --- Stripe's webhook, verified by the stripe library --------------------------------


def stripe_signature(body: bytes, *, secret: str = STRIPE_ENDPOINT_SECRET, at: float | None = None) -> str:
    """The ``Stripe-Signature`` header Stripe sends: t=<unix time>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>."""
    stamp = int(at if at is not None else time.time())
    mac = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={mac}"


def stripe_event(payment: Payment, *, kind: str = "checkout.session.completed", **session) -> bytes:
    fields = {
        "id": payment.transaction_id or "cs_test_1",
        "object": "checkout.session",
        "client_reference_id": payment.token,
        "status": "complete",
        "payment_status": "paid",
        "amount_total": int(payment.total * 100),
        "currency": payment.currency.lower(),
        "payment_intent": "pi_test_1",
        **session,
    }
    event = {"id": "evt_test_1", "object": "event", "type": kind, "data": {"object": fields}}
    return json.dumps(event).encode()


def webhook(body: bytes, signature: str | None, *, path: str = "/payments/process/stripe/"):
    headers = {} if signature is None else {"HTTP_STRIPE_SIGNATURE": signature}
    return Client(raise_request_exception=False).post(path, body, content_type="application/json", **headers)


@pytest.fixture
def stripe_payment(bought, stripe_shop) -> Payment:
    """A payment waiting on its Stripe checkout session (as pay leaves it once Stripe answered)."""
    _user, order = bought
    return Payment.objects.create(
        order=order,
        variant="stripe",
        currency="CNY",
        total=order.amount,
        description=f"Order {order.order_no}",
        transaction_id="cs_test_1",
    )


def test_a_correctly_signed_stripe_event_pays_the_order(stripe_payment, caplog):
    body = stripe_event(stripe_payment)
    response = webhook(body, stripe_signature(body))
    assert response.status_code == 200, response.content
    stripe_payment.refresh_from_db()
    assert stripe_payment.status == PaymentStatus.CONFIRMED and stripe_payment.settled_at is not None
    order = stripe_payment.order
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    # Stripe delivers again: 200, nothing changes.
    again = webhook(body, stripe_signature(body))
    assert again.status_code == 200
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and Payment.objects.filter(order=order).count() == 1
    assert not tracebacks(caplog)


def test_a_signed_expired_session_rejects_the_payment_only(stripe_payment):
    body = stripe_event(stripe_payment, kind="checkout.session.expired", status="expired", payment_status="unpaid")
    assert webhook(body, stripe_signature(body)).status_code == 200
    stripe_payment.refresh_from_db()
    assert stripe_payment.status == PaymentStatus.REJECTED
    stripe_payment.order.refresh_from_db()
    assert stripe_payment.order.status == Order.Status.PENDING


def _forgeries(payment: Payment) -> list[tuple[str, bytes, str | None]]:
    body = stripe_event(payment)
    other = stripe_event(payment, amount_total=1)
    return [
        ("unsigned", body, None),
        ("empty signature", body, ""),
        ("signed with another secret", body, stripe_signature(body, secret="whsec_someone_else")),
        ("body changed after signing", other, stripe_signature(body)),
        ("signed an hour ago (a replay)", body, stripe_signature(body, at=time.time() - 3600)),
        ("garbage signature", body, "t=abc,v1=zz"),
        ("non-ASCII signature", body, "t=1,v1=\u00e9"),
        ("not JSON", b"not json", stripe_signature(b"not json")),
    ]


def test_forged_or_unsigned_stripe_events_are_refused_and_change_nothing(stripe_payment, caplog):
    caplog.set_level(logging.INFO)
    for what, body, signature in _forgeries(stripe_payment):
        for path in ("/payments/process/stripe/", f"/payments/process/{stripe_payment.token}/"):
            response = webhook(body, signature, path=path)
            assert 400 <= response.status_code < 500, (what, path, response.status_code, response.content)
            assert response.json()["code"], (what, path)
    stripe_payment.refresh_from_db()
    assert stripe_payment.status == PaymentStatus.WAITING and stripe_payment.settled_at is None
    stripe_payment.order.refresh_from_db()
    assert stripe_payment.order.status == Order.Status.PENDING
    assert not tracebacks(caplog)


def test_a_signed_event_of_one_payment_cannot_move_another(stripe_payment):
    other = Payment.objects.create(
        order=stripe_payment.order, variant="stripe", currency="CNY", total=stripe_payment.total, transaction_id="cs_2"
    )
    body = stripe_event(stripe_payment)
    response = webhook(body, stripe_signature(body), path=f"/payments/process/{other.token}/")
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    for payment in (stripe_payment, other):
        payment.refresh_from_db()
        assert payment.status == PaymentStatus.WAITING and payment.settled_at is None


def test_a_signed_event_for_another_amount_is_refused(stripe_payment, caplog):
    body = stripe_event(stripe_payment, amount_total=int(stripe_payment.total * 100) + 1)
    with caplog.at_level(logging.WARNING, logger="orders.payments"):
        response = webhook(body, stripe_signature(body))
    assert response.status_code == 400 and response.json()["code"] == "amount_mismatch"
    assert "payments.amount_mismatch" in caplog.text
    stripe_payment.refresh_from_db()
    assert stripe_payment.status == PaymentStatus.WAITING
    stripe_payment.order.refresh_from_db()
    assert stripe_payment.order.status == Order.Status.PENDING


def test_without_its_endpoint_secret_stripe_refuses_every_webhook(stripe_payment, settings, fresh_providers):
    """An empty secret would make any HMAC under the empty key valid: refused, 503."""
    path, config = settings.PAYMENT_VARIANTS["stripe"]
    settings.PAYMENT_VARIANTS = {"stripe": (path, {**config, "endpoint_secret": ""})}
    body = stripe_event(stripe_payment)
    assert_payments_unavailable(webhook(body, stripe_signature(body, secret="")))
    stripe_payment.refresh_from_db()
    assert stripe_payment.status == PaymentStatus.WAITING


# --- the whole way, against a stand-in for Stripe's API on this machine ---------------


class _StripeApi(BaseHTTPRequestHandler):
    """Answers what the shop asks Stripe (a checkout session, a refund) with the fields it reads."""

    calls: list[tuple[str, dict]] = []

    def do_POST(self):
        form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        fields = {key: values[0] for key, values in form.items()}
        self.calls.append((self.path, fields))
        if self.path == "/v1/checkout/sessions":
            answer = {
                "id": "cs_test_standin",
                "object": "checkout.session",
                "url": "https://checkout.stripe.com/c/pay/cs_test_standin",
                "status": "open",
                "payment_status": "unpaid",
                "client_reference_id": fields["client_reference_id"],
            }
        else:
            answer = {"id": "re_test_standin", "object": "refund", "status": "succeeded", "amount": fields["amount"]}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


@pytest.fixture
def stripe_api(monkeypatch):
    """Stripe's API, as far as the shop uses it, on a local port: (path, form) of each call."""
    import stripe

    server = ThreadingHTTPServer(("127.0.0.1", 0), _StripeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _StripeApi.calls = []
    monkeypatch.setattr(stripe, "api_base", f"http://127.0.0.1:{server.server_port}")
    yield _StripeApi.calls
    server.shutdown()
    server.server_close()


def test_pay_with_stripe_then_its_signed_webhook_pays(bought, stripe_shop, stripe_api):
    user, order = bought
    response = api_of(user).post(f"/api/orders/{order.order_no}/pay")
    assert response.status_code == 200, response.content
    payment = Payment.objects.get(order=order)
    assert response.json() == {
        "status": "pending",
        "payment": {
            "provider": "stripe",
            "reference": payment.token,
            "pay_url": "https://checkout.stripe.com/c/pay/cs_test_standin",
        },
    }
    [(path, session)] = stripe_api
    assert path == "/v1/checkout/sessions"
    assert session["client_reference_id"] == payment.token
    assert session["line_items[0][price_data][unit_amount]"] == str(int(order.amount * 100))
    assert session["line_items[0][price_data][currency]"] == "cny"
    assert session["success_url"].startswith("http://localhost:8000/")  # PAYMENT_HOST
    assert (payment.status, payment.transaction_id) == (PaymentStatus.WAITING, "cs_test_standin")
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING

    body = stripe_event(payment)
    assert webhook(body, stripe_signature(body)).status_code == 200
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    payment.refresh_from_db()
    assert (payment.status, payment.settled_at is not None, payment.refund_reason) == (
        PaymentStatus.CONFIRMED,
        True,
        "",
    )
    assert api_of(user).get(f"/api/orders/{order.order_no}/").json()["payment_status"] == "succeeded"


def test_a_stripe_payment_after_the_order_was_cancelled_is_refunded_through_stripe(
    stripe_payment, stripe_api, django_capture_on_commit_callbacks
):
    order = stripe_payment.order
    with django_capture_on_commit_callbacks(execute=True):
        order_cancel(order=order, reason="shopper")
    body = stripe_event(stripe_payment)
    assert webhook(body, stripe_signature(body)).status_code == 200  # acknowledged: Stripe stops retrying
    [(path, refund)] = stripe_api
    assert path == "/v1/refunds"
    assert refund == {
        "payment_intent": "pi_test_1",
        "amount": str(int(order.amount * 100)),
        "reason": "requested_by_customer",
    }
    stripe_payment.refresh_from_db()
    assert (stripe_payment.status, stripe_payment.refund_reason) == (PaymentStatus.REFUNDED, "late")
    assert stripe_payment.settled_at is not None
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
