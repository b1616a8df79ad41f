"""Payments that say what happened (issue 42): back from the provider, My orders says the
outcome (Django's messages, from the shop's records, never from the URL's claim); the
order's timeline has one entry per attempt with its outcome; the paid time is not under
"Time left to pay"; the payment page names the order in the shopper's language."""

import re

import pytest
from django.test import Client

from core.clock import shop_time
from orders.models import Order, Payment
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot
from tests.factories import UserFactory, make_activity
from tests.orders.addresses import give_address

pytestmark = pytest.mark.django_db


@pytest.fixture
def bought():
    """A shopper with a shipping address and a pending order made by the real purchase path."""
    activity = make_activity(stock=5)
    user = UserFactory()
    give_address(user)
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    order = Order.objects.get(activity=activity, user=user)
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return order, client


def attempt(client: Client, order: Order, outcome: str):
    """Pay on the order, choose the outcome on the provider's page, come back."""
    to_provider = client.post(f"/orders/{order.order_no}/pay/")
    assert to_provider.status_code == 302, to_provider.content
    back = client.post(to_provider["Location"], {"outcome": outcome})
    assert back.status_code == 302
    return back["Location"]


def messages_of(html: str) -> list[str]:
    return [re.sub(r"\s+", " ", m).strip() for m in re.findall(r'<li class="msg [^"]*">(.*?)</li>', html, re.S)]


def timeline_of(html: str) -> list[str]:
    section = html.split('id="timeline"', 1)[1].split("</ol>", 1)[0]
    return [re.sub(r"\s+", " ", t).strip() for t in re.findall(r"<span>(.*?)<time", section, re.S)]


def test_a_failed_payment_comes_back_with_a_message_and_the_timeline_tells_each_attempt(bought):
    order, client = bought
    back = attempt(client, order, "failed")
    assert back == f"/orders/?failed={order.order_no}"
    said = messages_of(client.get(back).content.decode())
    deadline = shop_time(order.pay_deadline)
    assert said == [
        f"The payment for order {order.order_no} did not go through: nothing was paid. "
        f"You can try again until {deadline}."
    ]
    attempt(client, order, "failed")
    done = attempt(client, order, "succeeded")
    assert messages_of(client.get(done).content.decode()) == [f"Order {order.order_no} is paid. Thank you!"]

    page = client.get(f"/orders/{order.order_no}/").content.decode()
    events = timeline_of(page)
    assert "Payment started" not in page
    assert [e for e in events if e.startswith("Payment ")] == [
        "Payment 1: failed",
        "Payment 2: failed",
        "Payment 3: accepted",
    ]
    order.refresh_from_db()
    assert f'id="order-paid-at">{shop_time(order.paid_at)}</time>' in page


def test_the_paid_time_is_not_under_time_left_to_pay(bought):
    order, client = bought
    attempt(client, order, "succeeded")
    page = client.get("/orders/").content.decode()
    head = page.split("<thead>", 1)[1].split("</thead>", 1)[0]
    assert "Time left to pay" not in head and ">Payment</th>" in head
    order.refresh_from_db()
    assert f"Paid at {shop_time(order.paid_at)}" in page


@pytest.mark.parametrize(
    "query",
    ["failed=A999-nobody", "paid=A999-nobody", "failed=%00", "failed=" + "9" * 500, "paid=&failed="],
)
def test_a_made_up_return_says_nothing_and_fails_nothing(bought, query):
    _order, client = bought
    page = client.get(f"/orders/?{query}")
    assert page.status_code == 200 and messages_of(page.content.decode()) == []


def test_someone_elses_order_in_the_return_url_says_nothing(bought):
    order, _ = bought
    stranger = Client()
    stranger.force_login(UserFactory())
    for query in (f"failed={order.order_no}", f"paid={order.order_no}"):
        page = stranger.get(f"/orders/?{query}")
        assert page.status_code == 200 and messages_of(page.content.decode()) == []


def test_a_paid_claim_for_a_pending_order_is_not_believed(bought):
    order, client = bought
    said = messages_of(client.get(f"/orders/?paid={order.order_no}").content.decode())
    assert said == [f"Order {order.order_no}: the payment is being confirmed."]
    assert Order.objects.get(pk=order.pk).status == Order.Status.PENDING


def test_the_payment_page_names_the_order_in_chinese(bought):
    order, client = bought
    to_provider = client.post(f"/orders/{order.order_no}/pay/")
    assert Payment.objects.filter(order=order).exists()
    chinese = Client(HTTP_ACCEPT_LANGUAGE="zh-CN").get(to_provider["Location"]).content.decode()
    assert f'<p id="gateway-order">订单 {order.order_no}</p>' in chinese
