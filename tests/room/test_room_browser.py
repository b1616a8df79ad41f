"""The waiting room in real Chromium against gunicorn, at phone width: from the sale's page to
its room, join before the start, see the place and the estimate move, get let in, buy with the
ticket (its answer lost on the way: the room asks the result), pay; and the page in Chinese."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect
from rest_framework.test import APIClient

from orders.models import Order
from seckill.models import Activity
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from tests.factories import UserFactory, make_users, token_of
from tests.helpers import wait_until
from tests.orders.addresses import give_address
from tests.shopper.conftest import (  # noqa: F401 - the browser's fixtures
    chromium_browser,
    collected_static,
    shop_server,
)

from .conftest import room_sale

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
OTHERS = 12


def test_join_before_the_start_wait_get_in_buy_and_pay(shop_server, chromium_browser, celery_worker):  # noqa: F811
    activity = room_sale(stock=20, started=False, room_rate=2, room_window_seconds=120, room_prequeue_minutes=120)
    for other in make_users(OTHERS, prefix="queuer"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(other)}")
        assert client.post(f"/api/activities/{activity.pk}/room/join").status_code == 200

    alice = UserFactory(username="alice-room")
    give_address(alice)
    context = chromium_browser.new_context(viewport=PHONE, locale="en-US", is_mobile=True)
    page = context.new_page()
    page.goto(f"{shop_server}/accounts/login/?next=/seckill/{activity.pk}/")
    page.get_by_label("Username").fill(alice.username)
    page.get_by_label("Password").fill("pw-for-tests")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**/seckill/{activity.pk}/")
    # The sale's own page: its button leads to the room.
    page.get_by_role("button", name="Join the queue").click()
    page.wait_for_url(f"**/seckill/{activity.pk}/room/")
    page.get_by_role("button", name="Join the queue").click()
    state = page.locator("#room-state")
    expect(state).to_contain_text("Places are drawn at random when the sale starts", timeout=10_000)
    # Phone width: nothing scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # The start (moved to now, so the page joined before it however slow the machine is), then
    # the draw: the place Redis gave Alice is the one the page shows.
    Activity.objects.filter(pk=activity.pk).update(start_at=timezone.now())
    keys = ActivityKeys(activity.pk)
    place = wait_until(lambda: stock_redis().hget(keys.room_places, alice.pk), timeout=60, what="the draw")
    place = int(place)
    expect(page.locator("#room-place")).to_have_text(str(place), timeout=30_000)
    seen_ahead, seen_estimate = set(), set()

    def let_in() -> bool:
        seen_ahead.add(page.locator("#room-ahead").text_content())
        seen_estimate.add(page.locator("#room-estimate").text_content())
        return page.locator("#buy").is_visible()

    wait_until(let_in, timeout=60, interval=0.1, what="Alice to be let in")
    if place > 2:  # the room lets 2 a second in: the figures moved while she waited
        assert len(seen_ahead) >= 2 and len(seen_estimate) >= 2, (seen_ahead, seen_estimate)
    assert any(re.fullmatch(r"\d+ s", text or "") for text in seen_estimate), seen_estimate
    expect(state).to_contain_text("It is your turn!")

    # Her purchase goes through, but the answer the page reads is the one a reply lost
    # between the web process and Redis gives (503 outcome_unknown): the room finds the
    # outcome from the result (tests/promises/test_lost_reply.py).
    def answer_lost(route):
        sent = route.fetch()
        assert sent.status == 202, sent.text()
        route.fulfill(status=503, headers={"Retry-After": "2"}, json={"code": "outcome_unknown", "detail": "?"})

    page.route(re.compile(r".*/purchase$"), answer_lost)
    page.locator("#buy").click()
    outcome = page.locator("#outcome")
    expect(outcome.get_by_role("button", name="Pay now")).to_be_visible(timeout=60_000)
    order = Order.objects.get(activity=activity, user=alice)
    assert order.status == Order.Status.PENDING
    outcome.get_by_role("button", name="Pay now").click()
    page.wait_for_url("**/payments/simulated/**")
    page.locator("#gateway-succeeded").click()
    page.wait_for_url("**/orders/?paid=*")
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert stock_redis().hexists(keys.room_used, alice.pk)  # bought with the room's ticket

    # The same page in Chinese.
    page.goto(f"{shop_server}/zh-hans/seckill/{activity.pk}/room/")
    expect(page.locator("#join")).to_have_text("排队")
    context.close()
