"""Orders page, pay through the simulated gateway (HMAC-signed callback), cancel."""

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from inventory.models import SeckillStock
from orders.models import Order, Payment
from orders.payments import payment_sign
from seckill.purchase import purchase_reserve
from seckill.replay import reservations_drain
from seckill.selectors import activity_snapshot, redis_remaining
from tests.factories import UserFactory, make_activity

pytestmark = pytest.mark.django_db


@pytest.fixture
def bought():
    """A live activity and a shopper with a pending order made by the real purchase path."""
    activity = make_activity(stock=5)
    user = UserFactory()
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    order = Order.objects.get(activity=activity, user=user)
    client = Client()
    client.force_login(user)
    return activity, user, order, client


def gateway_callback(client, order) -> dict:
    """Walk the shopper's path to the gateway; return the signed callback it hands back."""
    to_gateway = client.post(f"/orders/{order.order_no}/pay/")
    assert to_gateway.status_code == 302
    url = urlsplit(to_gateway["Location"])
    assert url.path == "/gateway/checkout/"
    params = {k: v[0] for k, v in parse_qs(url.query).items()}
    page = client.get(to_gateway["Location"])
    assert page.status_code == 200 and f"¥{order.amount}".encode() in page.content
    confirmed = client.post("/gateway/checkout/", {**params, "action": "pay"})
    assert confirmed.status_code == 200
    return confirmed.context["callback"]


def test_orders_page_shows_status_and_time_left(bought):
    _activity, _user, order, client = bought
    page = client.get("/orders/")
    assert page.status_code == 200
    body = page.content.decode()
    assert order.order_no in body and "pending payment" in body
    assert 'class="time-left" data-deadline="' in body
    assert "no-cache" in page["Cache-Control"] or "private" in page["Cache-Control"]
    assert Client().get("/orders/").status_code == 302  # login required


def test_pay_through_the_gateway_then_the_same_callback_again_pays_once(bought):
    _activity, _user, order, client = bought
    callback = gateway_callback(client, order)
    first = client.post("/payments/callback/", callback)
    assert first.status_code == 302 and first["Location"].startswith("/orders/")
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    paid_at = order.paid_at

    replay = Client().post("/payments/callback/", callback, HTTP_ACCEPT="application/json")
    assert replay.status_code == 200 and replay.json() == {"status": "paid", "order_no": order.order_no, "new": False}
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.paid_at == paid_at
    assert Payment.objects.filter(order=order).count() == 1
    assert "paid" in client.get("/orders/").content.decode()


@pytest.mark.parametrize(
    "tamper",
    [
        lambda cb: {"payload": cb["payload"]},  # no signature
        lambda cb: {"payload": cb["payload"], "signature": ""},
        lambda cb: {"payload": cb["payload"], "signature": "0" * 64},
        lambda cb: {"payload": cb["payload"], "signature": payment_sign(cb["payload"])[:-1] + "x"},
        lambda cb: {"payload": cb["payload"].replace('"succeeded"', '"succeeded" '), "signature": cb["signature"]},
    ],
    ids=["missing", "empty", "zeros", "one-char-off", "payload-changed"],
)
def test_wrong_or_missing_signature_is_400_and_changes_nothing(bought, tamper):
    _activity, _user, order, client = bought
    callback = gateway_callback(client, order)
    response = Client().post("/payments/callback/", tamper(callback))
    assert response.status_code == 400 and response.json()["code"] == "bad_signature"
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING and order.paid_at is None
    assert not Payment.objects.exists()


def test_signed_but_wrong_amount_or_order_is_refused(bought):
    _activity, _user, order, _client = bought
    payload = json.dumps({"gateway_ref": "r1", "order_no": order.order_no, "amount": "0.01", "status": "succeeded"})
    response = Client().post("/payments/callback/", {"payload": payload, "signature": payment_sign(payload)})
    assert response.status_code == 400 and response.json()["code"] == "amount_mismatch"
    payload = json.dumps({"gateway_ref": "r2", "order_no": "nope", "amount": "0.10", "status": "succeeded"})
    response = Client().post("/payments/callback/", {"payload": payload, "signature": payment_sign(payload)})
    assert response.status_code == 400
    garbage = "not json"
    assert (
        Client().post("/payments/callback/", {"payload": garbage, "signature": payment_sign(garbage)}).status_code
        == 400
    )
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING and not Payment.objects.exists()


def test_a_second_payment_for_a_paid_order_is_refused(bought):
    _activity, _user, order, client = bought
    client.post("/payments/callback/", gateway_callback(client, order))
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    payload = json.dumps(
        {"gateway_ref": "other", "order_no": order.order_no, "amount": str(order.amount), "status": "succeeded"}
    )
    response = Client().post("/payments/callback/", {"payload": payload, "signature": payment_sign(payload)})
    assert response.status_code == 409
    assert Payment.objects.filter(order=order).count() == 1


def test_gateway_refuses_a_tampered_checkout(bought):
    _activity, _user, order, client = bought
    to_gateway = client.post(f"/orders/{order.order_no}/pay/")
    params = {k: v[0] for k, v in parse_qs(urlsplit(to_gateway["Location"]).query).items()}
    params["amount"] = "0.01"
    assert client.get("/gateway/checkout/", params).status_code == 400
    assert client.post("/gateway/checkout/", {**params, "action": "pay"}).status_code == 400
    assert client.get("/gateway/checkout/").status_code == 400


def test_someone_elses_order_cannot_be_paid_or_cancelled(bought):
    _activity, _user, order, _client = bought
    stranger = Client()
    stranger.force_login(UserFactory())
    assert stranger.post(f"/orders/{order.order_no}/pay/").status_code == 404
    assert stranger.post(f"/orders/{order.order_no}/cancel/").status_code == 404
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING


def test_cancel_returns_the_stock(bought, django_capture_on_commit_callbacks):
    activity, _user, order, client = bought
    available = SeckillStock.objects.get(activity=activity).available
    in_redis = redis_remaining(activity.pk)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/orders/{order.order_no}/cancel/")
    assert response.status_code == 302
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
    assert SeckillStock.objects.get(activity=activity).available == available + order.quantity
    assert redis_remaining(activity.pk) == in_redis + order.quantity
    # A cancelled order cannot be paid any more.
    assert client.post(f"/orders/{order.order_no}/pay/").status_code == 302
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED


def test_payments_refused_without_a_secret(bought, settings):
    _activity, _user, order, _client = bought
    settings.PAYMENT_GATEWAY_SECRET = ""
    response = Client().post("/payments/callback/", {"payload": "{}", "signature": "x"})
    assert response.status_code == 503
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING
