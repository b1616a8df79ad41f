"""Orders page, pay through the simulated provider (its page, its signed notification to
the shop), refunds of late and second payments, cancel."""

import json
import logging
import time

import pytest
from django.test import Client
from payments import PaymentStatus
from rest_framework.test import APIClient

from inventory.models import SeckillStock
from orders.models import Order, Payment
from orders.services.lifecycle import order_cancel
from orders.simulated import SIGNATURE_HEADER, notification_build, notification_sign
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.replay import reservations_drain
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_snapshot
from tests.factories import UserFactory, make_activity
from tests.orders.addresses import give_address

pytestmark = pytest.mark.django_db


@pytest.fixture
def bought():
    """A live activity and a shopper (with a shipping address) with a pending order made by
    the real purchase path."""
    activity = make_activity(stock=5)
    user = UserFactory()
    give_address(user)
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    order = Order.objects.get(activity=activity, user=user)
    client = Client()
    client.force_login(user)
    return activity, user, order, client


def api_of(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def pay_start(user, order) -> dict:
    response = api_of(user).post(f"/api/orders/{order.order_no}/pay")
    assert response.status_code == 200, response.content
    return response.json()


def complete(pay_url: str, outcome: str):
    """The shopper's choice on the provider's page, as the contract's JSON call."""
    return Client().post(pay_url, {"outcome": outcome}, content_type="application/json", HTTP_ACCEPT="application/json")


def notify(payment: Payment, body: bytes, signature: str | None):
    """A notification to the shop's notification URL, as the provider would send it."""
    headers = {} if signature is None else {"HTTP_" + SIGNATURE_HEADER.upper().replace("-", "_"): signature}
    return Client().post(f"/payments/process/{payment.token}/", body, content_type="application/json", **headers)


def order_json(user, order) -> dict:
    return api_of(user).get(f"/api/orders/{order.order_no}/").json()


def test_orders_page_shows_status_and_time_left(bought):
    _activity, _user, order, client = bought
    page = client.get("/orders/")
    assert page.status_code == 200
    body = page.content.decode()
    assert order.order_no in body and "pending payment" in body
    assert 'class="time-left" data-deadline="' in body
    assert "no-cache" in page["Cache-Control"] or "private" in page["Cache-Control"]
    assert Client().get("/orders/").status_code == 302  # login required


def test_pay_starts_a_payment_and_does_not_pay(bought):
    _activity, user, order, _client = bought
    assert order_json(user, order)["payment_status"] == "none"
    started = pay_start(user, order)
    assert started["status"] == "pending"
    payment = Payment.objects.get(order=order)
    assert started["payment"] == {
        "provider": "simulated",
        "reference": payment.token,
        "pay_url": f"/payments/simulated/{payment.token}/",
    }
    assert (payment.status, payment.total) == (PaymentStatus.WAITING, order.amount)
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING and order.paid_at is None
    assert order_json(user, order)["payment_status"] == "pending"


def test_the_json_completion_pays_once(bought):
    _activity, user, order, _client = bought
    pay_url = pay_start(user, order)["payment"]["pay_url"]
    first = complete(pay_url, "succeeded")
    assert first.status_code == 200 and first.json() == {"outcome": "succeeded"}
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    paid_at = order.paid_at
    assert order_json(user, order)["payment_status"] == "succeeded"

    # Completed again, and the provider's same notification delivered again: nothing new.
    assert complete(pay_url, "succeeded").status_code == 200
    payment = Payment.objects.get(order=order)
    body, signature = notification_build(payment=payment, outcome="succeeded")
    again = notify(payment, body, signature)
    assert again.status_code == 200 and again.json()["status"] == PaymentStatus.CONFIRMED
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.paid_at == paid_at
    assert Payment.objects.filter(order=order).count() == 1
    payment.refresh_from_db()
    assert (payment.status, payment.refund_reason) == (PaymentStatus.CONFIRMED, "")
    assert pay_start(user, order) == {"status": "paid"}
    assert Payment.objects.filter(order=order).count() == 1


def test_pay_through_the_providers_page_in_a_browser_flow(bought):
    _activity, _user, order, client = bought
    to_provider = client.post(f"/orders/{order.order_no}/pay/")
    assert to_provider.status_code == 302
    payment = Payment.objects.get(order=order)
    assert to_provider["Location"] == f"/payments/simulated/{payment.token}/"
    page = client.get(to_provider["Location"])
    assert page.status_code == 200
    assert f"{order.amount} CNY".encode() in page.content and b'value="succeeded"' in page.content
    done = client.post(to_provider["Location"], {"outcome": "succeeded"})
    assert done.status_code == 302 and done["Location"] == f"/orders/?paid={order.order_no}"
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert "paid" in client.get("/orders/").content.decode()


def test_a_failed_checkout_leaves_the_order_payable(bought):
    _activity, user, order, _client = bought
    pay_url = pay_start(user, order)["payment"]["pay_url"]
    assert complete(pay_url, "failed").json() == {"outcome": "failed"}
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING
    assert Payment.objects.get(order=order).status == PaymentStatus.REJECTED
    assert order_json(user, order)["payment_status"] == "none"
    # That checkout is closed; a new one pays.
    assert complete(pay_url, "succeeded").status_code == 409
    assert complete(pay_start(user, order)["payment"]["pay_url"], "succeeded").status_code == 200
    order.refresh_from_db()
    assert order.status == Order.Status.PAID


@pytest.mark.parametrize(
    "tamper",
    [
        lambda body, sig: (body, None),
        lambda body, sig: (body, ""),
        lambda body, sig: (body, "0" * 64),
        lambda body, sig: (body, sig[:-1] + ("0" if sig[-1] != "0" else "1")),
        lambda body, sig: (body.replace(b'"succeeded"', b'"succeeded" '), sig),  # replayed with another body
        lambda body, sig: (body, sig[:-1] + "é"),
        lambda body, sig: (body, "签名" * 32),
    ],
    ids=["missing", "empty", "zeros", "one-char-off", "other-body", "non-ascii-tail", "non-ascii"],
)
def test_a_forged_notification_is_400_and_changes_nothing(bought, tamper):
    _activity, user, order, _client = bought
    pay_start(user, order)
    payment = Payment.objects.get(order=order)
    body, signature = tamper(*notification_build(payment=payment, outcome="succeeded"))
    response = notify(payment, body, signature)
    assert response.status_code == 400 and response.json()["code"] == "bad_signature"
    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == Order.Status.PENDING and order.paid_at is None
    assert payment.status == PaymentStatus.WAITING


# Well outside the 300 s window: the stamp is whole seconds and a loaded machine takes a
# moment between signing and verifying, so 301 s could land inside it.
@pytest.mark.parametrize("seconds_off", [-600, 600], ids=["stale", "from-the-future"])
def test_a_notification_outside_the_time_window_is_refused(bought, seconds_off):
    _activity, user, order, _client = bought
    pay_start(user, order)
    payment = Payment.objects.get(order=order)
    body, signature = notification_build(payment=payment, outcome="succeeded", now=time.time() + seconds_off)
    response = notify(payment, body, signature)
    assert response.status_code == 400 and response.json()["code"] == "stale_notification"
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING


def signed(fields: dict) -> tuple[bytes, str]:
    body = json.dumps(fields).encode()
    return body, notification_sign(body)


@pytest.mark.parametrize(
    "change, code",
    [
        ({"amount": "0.01"}, "amount_mismatch"),
        ({"amount": "lots"}, "amount_mismatch"),
        ({"currency": "USD"}, "currency_mismatch"),
        ({"reference": "00000000-0000-0000-0000-000000000000"}, "invalid_request"),
        ({"outcome": "maybe"}, "invalid_request"),
        ({"timestamp": "soon"}, "invalid_request"),
        ({"amount": 10}, "invalid_request"),
    ],
)
def test_a_signed_notification_for_the_wrong_money_or_payment_is_refused(bought, caplog, change, code):
    _activity, user, order, _client = bought
    pay_start(user, order)
    payment = Payment.objects.get(order=order)
    body, _signature = notification_build(payment=payment, outcome="succeeded")
    with caplog.at_level(logging.WARNING, logger="orders.payments"):
        response = notify(payment, *signed({**json.loads(body), **change}))
    assert response.status_code == 400 and response.json()["code"] == code
    if code.endswith("_mismatch"):
        assert f"payments.{code}" in caplog.text
    order.refresh_from_db()
    payment.refresh_from_db()
    assert order.status == Order.Status.PENDING and payment.status == PaymentStatus.WAITING


def test_garbage_notifications_are_400(bought):
    _activity, user, order, _client = bought
    pay_start(user, order)
    payment = Payment.objects.get(order=order)
    for body in [b"not json", b"[]", b"{}", "é".encode()]:
        response = notify(payment, body, notification_sign(body))
        assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    assert Client().get(f"/payments/process/{payment.token}/").status_code == 405


def test_a_success_after_the_order_was_cancelled_is_refunded_and_shown(bought, django_capture_on_commit_callbacks):
    _activity, user, order, client = bought
    pay_url = pay_start(user, order)["payment"]["pay_url"]
    with django_capture_on_commit_callbacks(execute=True):
        order_cancel(order=order, reason="shopper")
    response = complete(pay_url, "succeeded")
    assert response.status_code == 200  # acknowledged: the provider stops retrying
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED and order.paid_at is None
    payment = Payment.objects.get(order=order)
    assert (payment.status, payment.refund_reason) == (PaymentStatus.REFUNDED, "late")
    assert payment.settled_at is not None and payment.captured_amount == 0
    assert order_json(user, order)["payment_status"] == "refunded"
    row = client.get("/orders/").content.decode()
    assert "refunded" in row
    # The provider delivering it again changes nothing and is acknowledged.
    body, signature = notification_build(payment=payment, outcome="succeeded")
    assert notify(payment, body, signature).status_code == 200
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.REFUNDED


def test_a_second_success_for_a_paid_order_is_refunded(bought):
    _activity, user, order, client = bought
    first_url = pay_start(user, order)["payment"]["pay_url"]
    second_url = pay_start(user, order)["payment"]["pay_url"]  # a second tab
    assert first_url != second_url
    assert complete(first_url, "succeeded").status_code == 200
    order.refresh_from_db()
    paid_at = order.paid_at
    assert complete(second_url, "succeeded").status_code == 200
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.paid_at == paid_at
    first, second = Payment.objects.filter(order=order).order_by("id")
    assert (first.status, first.refund_reason) == (PaymentStatus.CONFIRMED, "")
    assert (second.status, second.refund_reason) == (PaymentStatus.REFUNDED, "duplicate")
    assert order_json(user, order)["payment_status"] == "succeeded"
    assert "refunded" in client.get("/orders/").content.decode()


def test_hostile_completions_of_the_providers_page(bought):
    _activity, user, order, _client = bought
    pay_url = pay_start(user, order)["payment"]["pay_url"]
    for body in ['{"outcome": "maybe"}', "[]", "not json", '{"outcome": ["succeeded"]}']:
        response = Client().post(pay_url, body, content_type="application/json", HTTP_ACCEPT="application/json")
        assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    unknown = "/payments/simulated/00000000-0000-0000-0000-000000000000/"
    assert complete(unknown, "succeeded").status_code == 404
    assert Client().get(unknown).status_code == 404
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING


def test_someone_elses_order_cannot_be_paid_or_cancelled(bought):
    _activity, _user, order, _client = bought
    stranger = Client()
    stranger.force_login(UserFactory())
    assert stranger.post(f"/orders/{order.order_no}/pay/").status_code == 404
    assert stranger.post(f"/orders/{order.order_no}/cancel/").status_code == 404
    assert api_of(UserFactory()).post(f"/api/orders/{order.order_no}/pay").status_code == 404
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING
    assert not Payment.objects.exists()


def test_cancel_returns_the_stock(bought, django_capture_on_commit_callbacks):
    activity, user, order, client = bought
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
    response = api_of(user).post(f"/api/orders/{order.order_no}/pay")
    assert response.status_code == 409 and response.json()["code"] == "not_payable"
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
    assert not Payment.objects.exists()


def test_payments_refused_without_a_secret(bought, settings):
    _activity, user, order, client = bought
    pay_url = pay_start(user, order)["payment"]["pay_url"]
    payment = Payment.objects.get(order=order)
    body, signature = notification_build(payment=payment, outcome="succeeded")
    settings.PAYMENT_GATEWAY_SECRET = ""

    response = api_of(user).post(f"/api/orders/{order.order_no}/pay")
    assert response.status_code == 503 and response.json()["code"] == "payments_unavailable"
    page = client.post(f"/orders/{order.order_no}/pay/")
    assert page.status_code == 503 and b"PAYMENT_GATEWAY_SECRET" in page.content
    assert client.get(pay_url).status_code == 503
    response = complete(pay_url, "succeeded")
    assert response.status_code == 503 and response.json()["code"] == "payments_unavailable"
    response = notify(payment, body, signature)
    assert response.status_code == 503 and response.json()["code"] == "payments_unavailable"
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING
    assert Payment.objects.filter(order=order).count() == 1  # nothing started without a secret


def test_payments_refused_without_a_provider(bought, settings):
    _activity, user, order, client = bought
    settings.PAYMENT_PROVIDER = ""
    response = api_of(user).post(f"/api/orders/{order.order_no}/pay")
    assert response.status_code == 503 and response.json()["code"] == "payments_unavailable"
    assert client.post(f"/orders/{order.order_no}/pay/").status_code == 503
    assert not Payment.objects.exists()
