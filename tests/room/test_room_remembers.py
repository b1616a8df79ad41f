# ruff: noqa: F811 - the browser's fixtures, imported, are the tests' arguments
"""The waiting room remembers the shopper (issue 42), in real Chromium against gunicorn at
1280x800 and 390x844, the shop's zone Asia/Shanghai and the browser's New York: the draw's
hash never widens a phone's page; a reload shows the shopper's place, their turn (the Buy
button, no second Join) or their order; after buying the turn's line is gone; "Buy before"
is on the shop's 24-hour clock; an ended sale offers no Join. Screenshots of the phone's
room (joined, admitted, bought, reloaded) land in SECKILL_SCREENSHOT_DIR when it is set."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from orders.models import Order
from seckill.models import Activity
from seckill.room.queue import room_pause
from tests.helpers import start_gunicorn, wait_until
from tests.shopper.conftest import (  # noqa: F401 - the browser's fixtures
    chromium_browser,
    collected_static,
    manifest_env,
    screenshot_dir,
)
from tests.shopper.test_browser import logged_in_page, shot

from .conftest import room_sale

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOP_ZONE = "Asia/Shanghai"
BROWSER_ZONE = "America/New_York"  # not the shop's: the page must not use it
SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
# "Buy before 15:14:01 Asia/Shanghai": 24-hour, in the shop's zone, labelled (core/clock.py).
BUY_BEFORE = re.compile(r"Buy before ([01]\d|2[0-3]):[0-5]\d:[0-5]\d Asia/Shanghai")


@pytest.fixture
def shanghai_shop(transactional_db, process_logs, collected_static):
    process, base = start_gunicorn(process_logs, workers=2, threads=8, env=manifest_env(DJANGO_TIME_ZONE=SHOP_ZONE))
    yield base
    process.stop()


def fits(page) -> bool:
    """Nothing wider than the screen (a phone's browser widens its layout viewport to the
    content, so window.innerWidth would grow with the page: the screen's width it is)."""
    return page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]


def room_page(chromium_browser, shop, size: str, username: str):
    context = chromium_browser.new_context(
        viewport=SIZES[size], locale="en-US", timezone_id=BROWSER_ZONE, is_mobile=size == "phone"
    )
    user, page = logged_in_page(context, shop, username)
    return context, user, page


@pytest.mark.parametrize("size", SIZES)
def test_the_room_fits_and_remembers_the_shopper_through_buying_and_reloads(
    shanghai_shop,
    chromium_browser,
    celery_worker,
    screenshot_dir,
    size,
):
    activity = room_sale(stock=5, started=True, room_window_seconds=300)
    context, alice, page = room_page(chromium_browser, shanghai_shop, size, f"alice-{size}")
    try:
        page.goto(f"{shanghai_shop}/seckill/{activity.pk}/room/")
        state = page.locator("#room-state")
        expect(page.locator("#room-seed")).to_contain_text(re.compile(r"[0-9a-f]{64}"), timeout=15_000)
        assert fits(page), "the page scrolls sideways"
        page.get_by_role("button", name="Join the queue").click()
        expect(page.locator("#buy")).to_be_visible(timeout=30_000)
        expect(state).to_have_text(BUY_BEFORE)
        assert fits(page)
        shot(page, screenshot_dir, f"room-{size}-1-admitted")

        # A reload: the same turn, without pressing Join again.
        page.reload()
        expect(page.locator("#buy")).to_be_visible(timeout=30_000)
        expect(page.locator("#join")).to_be_hidden()
        expect(page.locator("#room-place")).to_have_text("1")
        expect(state).to_have_text(BUY_BEFORE)

        page.locator("#buy").click()
        outcome = page.locator("#outcome")
        expect(outcome.get_by_role("button", name="Pay now")).to_be_visible(timeout=60_000)
        expect(state).to_have_text("You got it!")  # the used turn's "Buy before" is gone
        order = Order.objects.get(activity=activity, user=alice)
        expect(outcome.get_by_role("link", name=f"See order {order.order_no}")).to_be_visible()
        assert fits(page)
        shot(page, screenshot_dir, f"room-{size}-2-bought")

        # Reloaded after buying: the order, not "Sold out… Join the queue".
        page.reload()
        expect(state).to_have_text("You got it!", timeout=30_000)
        expect(outcome.get_by_role("link", name=f"See order {order.order_no}")).to_be_visible()
        expect(outcome.get_by_role("button", name="Pay now")).to_be_visible()
        expect(page.locator("#join")).to_be_hidden()
        expect(page.locator("#buy")).to_be_hidden()
        assert fits(page)
        shot(page, screenshot_dir, f"room-{size}-3-reloaded")
        outcome.get_by_role("link", name=f"See order {order.order_no}").click()
        page.wait_for_url(f"**/orders/{order.order_no}/")
    finally:
        context.close()


@pytest.mark.parametrize("size", SIZES)
def test_a_waiting_shopper_sees_their_place_after_a_reload(shanghai_shop, chromium_browser, screenshot_dir, size):
    # The merchant paused the room: the shopper gets a place and waits with it.
    activity = room_sale(stock=1, started=True)
    room_pause(activity.pk, paused=True)
    context, _, page = room_page(chromium_browser, shanghai_shop, size, f"bob-{size}")
    try:
        page.goto(f"{shanghai_shop}/seckill/{activity.pk}/room/")
        page.get_by_role("button", name="Join the queue").click()
        expect(page.locator("#room-place")).to_have_text(re.compile(r"^\d+$"), timeout=30_000)
        place = page.locator("#room-place").text_content()
        shot(page, screenshot_dir, f"room-{size}-0-joined")
        assert fits(page)
        page.reload()
        expect(page.locator("#room-place")).to_have_text(place, timeout=30_000)
        expect(page.locator("#join")).to_be_hidden()
        assert fits(page)
    finally:
        context.close()


@pytest.mark.parametrize("size", SIZES)
def test_an_ended_room_offers_no_join(shanghai_shop, chromium_browser, size):
    activity = room_sale(stock=5, started=True)
    Activity.objects.filter(pk=activity.pk).update(
        start_at=timezone.now() - timedelta(hours=2), end_at=timezone.now() - timedelta(seconds=1)
    )
    context, _, page = room_page(chromium_browser, shanghai_shop, size, f"carol-{size}")
    try:
        page.goto(f"{shanghai_shop}/seckill/{activity.pk}/room/")
        expect(page.locator("#room-state")).to_have_text("The sale has ended.", timeout=30_000)
        wait_until(lambda: not page.locator("#join").is_visible(), timeout=10, what="the Join button to go")
        assert fits(page)
    finally:
        context.close()
