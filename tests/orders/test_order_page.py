"""The order page (the shopper's own only), its timeline and actions; cancelling asks
first; the provider's page offers no payment for an order that cannot take one."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from orders.models import Order, Payment
from orders.payments import payment_start
from orders.services.lifecycle import order_cancel
from orders.simulated import checkout_complete
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot
from tests.factories import ProductFactory, UserFactory, make_activity

from .addresses import give_address

pytestmark = pytest.mark.django_db


@pytest.fixture
def bought():
    activity = make_activity(stock=3, product=ProductFactory(name="Phone X"))
    user = UserFactory()
    give_address(user)
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    client = Client()
    client.force_login(user)
    return user, Order.objects.get(activity=activity, user=user), client


def kinds(page) -> list[str]:
    return [e["kind"] for e in page.context["timeline"]]


def test_the_order_page_shows_product_address_timeline_and_actions(bought):
    _user, order, client = bought
    page = client.get(f"/orders/{order.order_no}/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "Phone X" in body and order.order_no in body
    assert "浦东新区世纪大道 100 号" in body  # where it would go, before payment
    assert kinds(page) == ["reserved", "ordered"]
    assert 'id="order-pay"' in body and f'href="/orders/{order.order_no}/cancel/"' in body
    assert "private" in page["Cache-Control"] or "no-cache" in page["Cache-Control"]

    payment = payment_start(order=order)
    assert payment.payment is not None
    checkout_complete(payment=payment.payment, outcome="succeeded")
    page = client.get(f"/orders/{order.order_no}/")
    assert kinds(page) == ["reserved", "ordered", "payment_started", "paid"]
    assert 'id="order-pay"' not in page.content.decode() and 'id="order-cancel"' not in page.content.decode()


def test_the_orders_list_names_the_product_and_links_the_order_page(bought):
    _user, order, client = bought
    body = client.get("/orders/").content.decode()
    assert "Phone X" in body and f'href="/orders/{order.order_no}/"' in body
    # Cancel is a link to the confirmation, not a one-click form.
    assert f'action="/orders/{order.order_no}/cancel/"' not in body
    assert f'href="/orders/{order.order_no}/cancel/"' in body


def test_a_cancelled_and_refunded_order_shows_it_in_the_timeline(bought):
    _user, order, client = bought
    started = payment_start(order=order)
    order_cancel(order=order, reason="shopper")
    assert started.payment is not None
    checkout_complete(payment=started.payment, outcome="succeeded")  # late: refunded
    page = client.get(f"/orders/{order.order_no}/")
    assert set(kinds(page)) == {"reserved", "ordered", "payment_started", "cancelled", "refunded"}
    assert "Cancelled by you" in page.content.decode()


@pytest.mark.parametrize("order_no", ["A1-0-0-0", "nope", "%00", "x" * 300, "address2"])
def test_someone_elses_or_no_order_is_404(bought, order_no):
    _user, order, _client = bought
    stranger = Client()
    stranger.force_login(UserFactory())
    assert stranger.get(f"/orders/{order.order_no}/").status_code == 404
    assert stranger.get(f"/orders/{order.order_no}/cancel/").status_code == 404
    assert stranger.get(f"/orders/{order_no}/").status_code == 404
    assert Client().get(f"/orders/{order.order_no}/").status_code == 302  # sign in first


def test_cancel_asks_first_and_only_the_confirmation_cancels(bought):
    _user, order, client = bought
    confirm = client.get(f"/orders/{order.order_no}/cancel/")
    assert confirm.status_code == 200
    assert b'id="cancel-confirm"' in confirm.content and b'id="cancel-keep"' in confirm.content
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING  # looking at the question changes nothing

    done = client.post(f"/orders/{order.order_no}/cancel/")
    assert done.status_code == 302 and done["Location"] == f"/orders/{order.order_no}/"
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
    again = client.get(f"/orders/{order.order_no}/cancel/")
    assert again.status_code == 200 and b'id="cancel-confirm"' not in again.content


def _checkout_page(client, order) -> str:
    started = payment_start(order=order)
    assert started.payment is not None
    return started.pay_url


def test_the_providers_page_offers_no_payment_for_a_paid_order(bought):
    _user, order, client = bought
    first = _checkout_page(client, order)
    second = _checkout_page(client, order)  # a second tab, started before the first was paid
    assert b'id="gateway-succeeded"' in client.get(second).content
    checkout_complete(payment=Payment.objects.get(token=first.rstrip("/").split("/")[-1]), outcome="succeeded")
    page = client.get(second)
    assert page.status_code == 200
    assert b'id="gateway-succeeded"' not in page.content and b"already paid" in page.content


def test_the_providers_page_offers_no_payment_for_a_cancelled_or_expired_order(bought):
    _user, order, client = bought
    pay_url = _checkout_page(client, order)
    Order.objects.filter(pk=order.pk).update(pay_deadline=timezone.now() - timedelta(seconds=1))
    page = client.get(pay_url)
    assert b'id="gateway-succeeded"' not in page.content and b"time to pay" in page.content
    Order.objects.filter(pk=order.pk).update(pay_deadline=timezone.now() + timedelta(minutes=5))
    order.refresh_from_db()
    order_cancel(order=order, reason="shopper")
    page = client.get(pay_url)
    assert b'id="gateway-succeeded"' not in page.content and b"cancelled" in page.content


def test_the_order_page_and_the_address_form_speak_chinese(bought):
    _user, order, client = bought
    client.cookies["django_language"] = "zh-hans"
    page = client.get(f"/orders/{order.order_no}/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "订单进度" in page and "收货地址" in page and "已为你锁定商品" in page
    form = client.get("/orders/address/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "收件人" in form and "中国大陆" in form and "保存地址" in form
