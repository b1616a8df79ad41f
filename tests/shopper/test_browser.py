"""The shopper's page in real Chromium (Debian's package, driven by Playwright) against
gunicorn and a Celery worker on the test database. Screenshots go to docs/screenshots/."""

import re
import time
import urllib.request
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from orders.models import Order, Payment
from orders.services.lifecycle import order_cancel
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.activities import activity_save
from seckill.sale.replay import reservations_drain
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_snapshot
from tests.factories import ProductFactory, UserFactory, make_activity
from tests.helpers import start_gunicorn, wait_until
from tests.orders.addresses import give_address
from tests.shopper.conftest import manifest_env

pytestmark = pytest.mark.slow

SHOP_ZONE = "Asia/Shanghai"  # the demo shop's, as `make run` sets it: the screenshots show its times


@pytest.fixture
def shop_server(transactional_db, process_logs, collected_static):
    process, base = start_gunicorn(process_logs, workers=2, threads=8, env=manifest_env(DJANGO_TIME_ZONE=SHOP_ZONE))
    yield base
    process.stop()


@pytest.fixture
def browser_context(chromium_browser):
    context = chromium_browser.new_context(
        viewport={"width": 1000, "height": 760}, locale="en-US", timezone_id=SHOP_ZONE
    )
    yield context
    context.close()


CLOCK_AHEAD_BY_AN_HOUR = """
(() => {
  const shift = 3600 * 1000;
  const RealDate = Date;
  class ShiftedDate extends RealDate {
    constructor(...args) { if (args.length === 0) { super(RealDate.now() + shift); } else { super(...args); } }
    static now() { return RealDate.now() + shift; }
  }
  window.Date = ShiftedDate;
})();
"""


def remaining_ms(page) -> int | None:
    value = page.locator("#countdown").get_attribute("data-remaining-ms")
    return int(value) if value else None


def shot(page, folder, name: str, *, full_page: bool = False) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 1000


def demo_activity(seconds_to_start: float, stock: int = 3):
    start = timezone.now() + timedelta(seconds=seconds_to_start)
    product = ProductFactory(
        name="Demo phone", list_price=Decimal("3999.00"), description="A phone with a big screen and a small price."
    )
    activity = make_activity(
        stock=stock,
        started=False,
        title="Phone for a yuan",
        product=product,
        seckill_price=Decimal("1.00"),
        start_at=start,
        end_at=start + timedelta(hours=2),
    )
    return activity, start


def logged_in_page(context, shop_server, username: str):
    user = UserFactory(username=username)
    give_address(user)  # the pay step asks for it first (tests/shopper/test_order_browser.py)
    page = context.new_page()
    page.goto(f"{shop_server}/accounts/login/?next=/orders/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill("pw-for-tests")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/orders/")
    return user, page


def test_countdown_start_buy_and_pay(shop_server, celery_worker, browser_context, screenshot_dir):
    user, page = logged_in_page(browser_context, shop_server, "alice")
    activity, start = demo_activity(seconds_to_start=20)
    page.goto(f"{shop_server}/seckill/{activity.pk}/")
    expect(page.locator("#account")).to_contain_text("alice")  # from /api/me, not from the cached page

    loads = []
    page.on("load", lambda _: loads.append(time.monotonic()))
    purchases = []
    page.on("request", lambda r: r.method == "POST" and "/purchase" in r.url and purchases.append(r.url))
    flag_urls = []
    page.on("request", lambda r: "/flag.js" in r.url and flag_urls.append(r.url))

    button = page.locator("#buy")
    expect(button).to_be_disabled()
    first = wait_until(lambda: remaining_ms(page), timeout=30, what="the countdown")
    wait_until(lambda: remaining_ms(page) < first - 1500, timeout=30, what="the countdown to move")
    expect(page.locator("#countdown")).to_contain_text("Starts in")
    assert timezone.now() < start
    expect(button).to_be_disabled()
    shot(page, screenshot_dir, "1-before-start")

    # The start arrives: the flag turns on and the button enables, without a reload.
    expect(button).to_be_enabled(timeout=90_000)
    assert timezone.now() >= start
    assert not loads, "the page was reloaded"
    expect(page.locator("#countdown")).to_contain_text("On sale now!")
    # Every poll had its own random parameter.
    assert len(flag_urls) >= 2 and len(set(flag_urls)) == len(flag_urls)
    assert all(re.search(r"flag\.js\?v=[0-9a-f]{16}$", u) for u in flag_urls)
    shot(page, screenshot_dir, "2-at-start")

    button.click()
    expect(button).to_be_disabled()
    button.click(force=True, timeout=2000)  # a disabled button swallows the click
    page.keyboard.press("Enter")
    outcome = page.locator("#outcome")
    expect(outcome).to_contain_text(re.compile(r"You got it! Pay within \d\d:\d\d"), timeout=90_000)
    assert len(purchases) == 1, purchases
    expect(button).to_be_disabled()
    order = Order.objects.get(activity=activity, user=user)
    assert order.status == Order.Status.PENDING
    shot(page, screenshot_dir, "3-after-purchase")

    # Pay: the simulated provider's page, its signed notification to the shop, the orders page.
    outcome.get_by_role("button", name="Pay now").click()
    page.wait_for_url("**/payments/simulated/**")
    expect(page.locator("h1")).to_contain_text("Pay 1.00 CNY")
    page.locator("#gateway-succeeded").click()
    page.wait_for_url("**/orders/?paid=*")
    row = page.locator(f"#order-{order.order_no}")
    expect(row.locator(".status")).to_have_text("paid")
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert list(Payment.objects.filter(order=order).values_list("status", flat=True)) == ["confirmed"]
    assert len(purchases) == 1
    shot(page, screenshot_dir, "4-orders")


def test_a_payment_completed_after_the_order_was_cancelled_is_refunded_and_shown(shop_server, browser_context):
    user, page = logged_in_page(browser_context, shop_server, "dora")
    activity = make_activity(stock=2)
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    order = Order.objects.get(activity=activity, user=user)
    page.goto(f"{shop_server}/orders/")
    page.locator(f"#order-{order.order_no}").get_by_role("button", name="Pay").click()
    page.wait_for_url("**/payments/simulated/**")
    # While the shopper is on the provider's page, the order is cancelled.
    order_cancel(order=order, reason="shopper")
    page.locator("#gateway-succeeded").click()
    page.wait_for_url(re.compile(rf"/orders/\?failed={order.order_no}$"))
    expect(page.locator(".messages")).to_contain_text(f"Order {order.order_no} is no longer waiting for payment.")
    row = page.locator(f"#order-{order.order_no}")
    expect(row.locator(".status")).to_have_text("cancelled")
    expect(row.locator(".refund")).to_contain_text("refunded")
    payment = Payment.objects.get(order=order)
    assert (payment.status, payment.refund_reason) == ("refunded", "late")
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED and order.paid_at is None


def test_a_client_clock_an_hour_ahead_changes_nothing(shop_server, browser_context):
    activity, start = demo_activity(seconds_to_start=20)
    browser_context.add_init_script(CLOCK_AHEAD_BY_AN_HOUR)
    page = browser_context.new_page()
    page.goto(f"{shop_server}/seckill/{activity.pk}/")
    assert page.evaluate("Date.now()") - time.time() * 1000 > 3_500_000  # the clock is really off

    left = wait_until(lambda: remaining_ms(page), timeout=30, what="the countdown")
    true_left = (start - timezone.now()).total_seconds() * 1000
    # Counted on server time: what the page shows is what is really left (a client-clock
    # countdown would show 0 and "started").
    assert 0 < left and abs(left - true_left) < 10_000, (left, true_left)
    button = page.locator("#buy")
    expect(button).to_be_disabled()
    expect(button).to_be_enabled(timeout=90_000)
    assert timezone.now() >= start, "enabled before the server's start"


def test_fingerprinted_assets_are_cached_for_a_year_and_the_page_is_public(shop_server):
    activity, _ = demo_activity(seconds_to_start=3600)
    with urllib.request.urlopen(f"{shop_server}/seckill/{activity.pk}/") as response:
        headers, body = response.headers, response.read().decode()
    assert "public" in headers["Cache-Control"] and "s-maxage" in headers["Cache-Control"]
    assert headers.get_all("Set-Cookie") is None
    assert "cookie" not in (headers.get("Vary") or "").lower()
    assets = re.findall(r'(?:src|href)="(/static/seckill/[\w.-]+\.[0-9a-f]{12}\.(?:js|css))"', body)
    assert {a.split("/")[-1].split(".")[0] for a in assets} >= {"activity", "shop", "site"}, assets
    for asset in assets:
        with urllib.request.urlopen(f"{shop_server}{asset}") as response:
            cache_control = response.headers["Cache-Control"]
        assert "max-age=315360000" in cache_control and "immutable" in cache_control, (asset, cache_control)


def test_a_chinese_browser_lands_on_the_chinese_page(shop_server, chromium_browser, screenshot_dir):
    activity, _ = demo_activity(seconds_to_start=3600)
    context = chromium_browser.new_context(
        viewport={"width": 1000, "height": 760}, locale="zh-CN", timezone_id=SHOP_ZONE
    )
    try:
        page = context.new_page()
        page.goto(f"{shop_server}/seckill/{activity.pk}/")
        page.wait_for_url(f"**/zh-hans/seckill/{activity.pk}/")
        expect(page.locator("#buy")).to_have_text("立即抢购")
        expect(page.locator("#countdown")).to_contain_text("距开始还有")
        shot(page, screenshot_dir, "5-zh-hans")
        # The switch: English chosen explicitly sticks, whatever the browser prefers.
        page.get_by_role("link", name="English").click()
        page.wait_for_url(f"**/seckill/{activity.pk}/")
        expect(page.locator("#buy")).to_have_text("Buy now")
        page.reload()
        expect(page.locator("#buy")).to_have_text("Buy now")
        assert "/zh-hans/" not in page.url
    finally:
        context.close()


def sum_asked(question: str) -> int:
    a, b = re.fullmatch(r"What is (\d+) \+ (\d+)\?", question).groups()
    return int(a) + int(b)


def test_a_wrong_captcha_answer_brings_a_new_question_and_the_right_one_buys(
    shop_server, celery_worker, browser_context, screenshot_dir
):
    user, page = logged_in_page(browser_context, shop_server, "carol")
    activity, _ = demo_activity(seconds_to_start=-5)  # on sale already
    activity.captcha_required = True  # as a merchant ticks it in admin
    activity_save(activity=activity)
    page.goto(f"{shop_server}/seckill/{activity.pk}/")
    expect(page.locator("#account")).to_contain_text("carol")

    challenges, purchases = [], []
    page.on("request", lambda r: r.method == "POST" and r.url.endswith("/captcha") and challenges.append(r))
    page.on("request", lambda r: r.method == "POST" and r.url.endswith("/purchase") and purchases.append(r))
    form, question, outcome = page.locator("#captcha"), page.locator("#captcha-question"), page.locator("#outcome")
    answer = page.get_by_label("Your answer")

    # The click fetches a challenge and shows it; no purchase leaves before it is answered.
    expect(form).to_be_hidden()
    page.locator("#buy").click()
    expect(page.locator("#buy")).to_be_disabled()  # the 10-second grey button as before
    expect(form).to_be_visible()
    expect(outcome).to_contain_text("Answer the security question to confirm your purchase.")
    assert len(challenges) == 1  # its answer is on the page, so Playwright has seen it
    first = challenges[0].response().json()
    expect(question).to_have_text(first["question"])
    expect(answer).to_be_focused()
    assert purchases == []

    answer.fill(str(sum_asked(first["question"]) + 1))
    page.get_by_role("button", name="Confirm and buy").click()
    expect(outcome).to_contain_text("That answer was wrong or has expired. Please answer this new question.")
    assert len(challenges) == 2
    second = challenges[1].response().json()
    assert second["captcha_id"] != first["captcha_id"]
    expect(question).to_have_text(second["question"])
    expect(answer).to_have_value("")
    assert len(purchases) == 1
    assert purchases[0].post_data_json["captcha_id"] == first["captcha_id"]
    assert purchases[0].response().status == 403 and purchases[0].response().json()["code"] == "captcha_invalid"
    assert redis_remaining(activity.pk) == 3 and not Order.objects.filter(activity=activity).exists()
    shot(page, screenshot_dir, "6-captcha-wrong-answer", full_page=True)  # the focused field scrolled the page

    answer.fill(str(sum_asked(second["question"])))
    answer.press("Enter")
    page.keyboard.press("Enter")  # the challenge is spent: this one sends nothing
    expect(outcome).to_contain_text(re.compile(r"You got it! Pay within \d\d:\d\d"), timeout=90_000)
    expect(form).to_be_hidden()
    assert len(purchases) == 2 and len(challenges) == 2
    assert purchases[1].post_data_json == {
        "token": purchases[0].post_data_json["token"],
        "quantity": 1,
        "captcha_id": second["captcha_id"],
        "captcha_answer": str(sum_asked(second["question"])),
    }
    assert purchases[1].response().status == 202
    order = Order.objects.get(activity=activity)
    assert order.user == user and order.status == Order.Status.PENDING and order.quantity == 1
    assert redis_remaining(activity.pk) == 2
