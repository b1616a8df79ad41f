"""What a shopper sees, in real Chromium against one gunicorn for the module (the shop's
time zone Asia/Shanghai, as `make run`'s): sold out on the page and the list, the win in
view on a phone, local times, the header on a phone, the language of a /zh-hans/ link,
of the account pages reached from it and of a signed-in shopper's mails after the switch."""

import os
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone
from playwright.sync_api import expect

from accounts.models import AccountProfile
from orders.models import Order
from orders.services.lifecycle import order_cancel
from seckill.sale.activities import activity_save
from seckill.sale.replay import reservations_drain
from tests.factories import UserFactory, make_activity
from tests.helpers import start_gunicorn, wait_until
from tests.shopper.conftest import CHROMIUM, CHROMIUM_ARGS, manifest_env
from tests.shopper.test_activity_page import sell
from tests.shopper.test_browser import demo_activity, logged_in_page

pytestmark = pytest.mark.slow

SHOP_ZONE = "Asia/Shanghai"
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def module_server(django_db_setup, collected_static, tmp_path_factory):
    """One gunicorn for the module's tests: each test's rows are committed (transactional_db)
    and the server reads them; the suite flushes Redis between tests, as for any server."""
    process, base = start_gunicorn(
        tmp_path_factory.mktemp("shopper-browser"), workers=2, threads=8, env=manifest_env(DJANGO_TIME_ZONE=SHOP_ZONE)
    )
    yield base
    process.stop()


@pytest.fixture
def shop(module_server, transactional_db):
    return module_server


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # The ORM is used in this thread while Playwright's loop runs (see conftest.chromium_browser).
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield launched
            launched.close()
            connections.close_all()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def context(browser):
    made = []

    def new(**options):
        options = {"viewport": {"width": 1000, "height": 760}, "locale": "en-US", "timezone_id": SHOP_ZONE, **options}
        made.append(browser.new_context(**options))
        return made[-1]

    yield new
    for c in made:
        c.close()


def card(page, activity):
    return page.locator(f'li.card[data-activity="{activity.pk}"]')


def test_sold_out_is_shown_on_the_page_and_the_list_and_on_sale_again_when_a_unit_comes_back(
    shop, context, screenshot_dir
):
    activity = make_activity(stock=2, title="Two phones")
    orders = sell(activity, 2)
    page = context().new_page()
    page.goto(f"{shop}/seckill/{activity.pk}/")
    countdown, button = page.locator("#countdown"), page.locator("#buy")
    expect(countdown).to_have_attribute("data-phase", "sold_out")
    expect(countdown).to_have_text("Sold out")
    expect(button).to_be_disabled()
    expect(page.locator("#stock-left")).to_have_text("0 left")
    expect(page.locator("#buy-hint")).to_contain_text("Units may come back")
    page.screenshot(path=str(screenshot_dir / "7-sold-out.png"))
    page.goto(f"{shop}/")
    expect(card(page, activity).locator(".badge")).to_have_text("sold out")
    expect(card(page, activity).locator(".left")).to_have_text("None left")

    order_cancel(order=orders[0], reason="shopper")  # committed: its unit goes back to Redis
    page.reload()
    expect(card(page, activity).locator(".badge")).to_have_text("live")
    expect(card(page, activity).locator(".left")).to_have_text("1 left")
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(countdown).to_contain_text("On sale now!")
    expect(page.locator("#stock-left")).to_have_text("1 left")
    expect(button).to_be_enabled()


def test_an_ended_sale_is_shown_as_ended(shop, context):
    start = timezone.now() - timedelta(hours=2)
    activity = make_activity(stock=2, start_at=start, end_at=timezone.now() - timedelta(seconds=1))
    page = context().new_page()
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(page.locator("#countdown")).to_have_text("The sale has ended.")
    expect(page.locator("#buy")).to_be_disabled()
    page.goto(f"{shop}/")
    expect(card(page, activity).locator(".badge")).to_have_text("ended")


def in_view(page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= page.viewport_size["height"]


def header_lines(page) -> int:
    """How many lines the header's words sit on."""
    tops = page.evaluate(
        """() => Array.from(document.querySelectorAll('header.top a, header.top button, header.top .who'))
              .filter((e) => e.getClientRects().length && e.offsetWidth > 1)
              .map((e) => Math.round(e.getBoundingClientRect().top))"""
    )
    lines: list[int] = []
    for top in sorted(tops):
        if not lines or top - lines[-1] > 8:
            lines.append(top)
    return len(lines)


def test_on_a_phone_the_win_and_the_pay_button_are_where_the_shopper_is_looking(shop, context, screenshot_dir):
    activity, _ = demo_activity(seconds_to_start=-5)
    user, page = logged_in_page(context(viewport=PHONE, is_mobile=True, has_touch=True), shop, "phoebe")
    not_found = []
    page.on("response", lambda r: r.status == 404 and not_found.append(r.url))
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(page.locator("#account")).to_contain_text("Log out")
    assert header_lines(page) <= 2
    button = page.locator("#buy")
    expect(button).to_be_enabled()
    assert in_view(page, button), "the buy button is below the fold"
    button.click()

    # The reservation becomes an order as the drain task would make it.
    def ordered() -> bool:
        reservations_drain(activity_id=activity.pk)
        return Order.objects.filter(user=user).exists()

    wait_until(ordered, timeout=30, what="the order")
    outcome = page.locator("#outcome")
    expect(outcome).to_contain_text(re.compile(r"You got it! Pay within 1[45]:\d\d"))
    pay = outcome.get_by_role("button", name="Pay now")
    expect(pay).to_be_visible()
    assert in_view(page, outcome.locator("p.msg")) and in_view(page, pay)
    # A win is no failure: nothing invites the shopper to try again.
    expect(page.locator("#buy-hint")).to_have_text("")
    expect(page.locator("main")).not_to_contain_text("try again")
    page.screenshot(path=str(screenshot_dir / "8-phone-win.png"))
    assert not [u for u in not_found if "favicon" in u], not_found


def test_after_a_failure_the_page_says_when_to_try_again(shop, context):
    activity = make_activity(stock=1)
    activity.min_member_level = 5  # as a merchant sets it in admin: this shopper is not eligible
    activity_save(activity=activity)
    _, page = logged_in_page(context(), shop, "fred")
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(page.locator("#account")).to_contain_text("Log out")
    page.locator("#buy").click()
    expect(page.locator("#outcome")).to_contain_text("not eligible")
    expect(page.locator("#buy-hint")).to_contain_text(re.compile(r"You can try again in \d+ s"))


def test_times_are_the_shops_local_times_on_the_pages_and_in_the_admin(shop, context):
    start = (timezone.now() + timedelta(days=1)).replace(second=0, microsecond=0)
    activity = make_activity(started=False, start_at=start, end_at=start + timedelta(hours=2))
    local = start.astimezone(ZoneInfo(SHOP_ZONE))
    page = context().new_page()
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(page.locator(".facts time").first).to_have_text(f"{local:%Y-%m-%d %H:%M:%S} {SHOP_ZONE}")
    page.goto(f"{shop}/")
    expect(card(page, activity).locator("time")).to_have_text(f"{local:%Y-%m-%d %H:%M:%S} {SHOP_ZONE}")

    # The admin shows the same local time, and a browser in the shop's zone is told nothing
    # about being hours ahead of the server: the clocks agree.
    get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-for-tests")
    page.goto(f"{shop}/admin/login/?next=/admin/seckill/activity/{activity.pk}/change/")
    page.get_by_label("Username").fill("boss")
    page.get_by_label("Password").fill("pw-for-tests")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**/admin/seckill/activity/{activity.pk}/change/")
    end = local + timedelta(hours=2)
    expect(page.locator("input[name=end_at_0]")).to_have_value(f"{end:%Y-%m-%d}")
    expect(page.locator("input[name=end_at_1]")).to_have_value(f"{end:%H:%M:%S}")
    expect(page.locator(".timezonewarning")).to_have_count(0)
    assert "server time" not in page.locator("#content").inner_text()
    # What is typed there is read as local time too.
    later = end + timedelta(hours=1)
    page.locator("input[name=end_at_0]").fill(f"{later:%Y-%m-%d}")
    page.locator("input[name=end_at_1]").fill(f"{later:%H:%M:%S}")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_url("**/admin/seckill/activity/")
    activity.refresh_from_db()
    assert activity.end_at == later


def test_a_zh_hans_link_opens_in_chinese_for_an_english_browser(shop, context):
    activity = make_activity(started=False)
    page = context(locale="en-US").new_page()
    page.goto(f"{shop}/zh-hans/seckill/{activity.pk}/")
    expect(page.locator("#buy")).to_have_text("立即抢购")
    expect(page.locator("#countdown")).to_contain_text("距开始还有")  # the script ran, and stayed
    assert f"/zh-hans/seckill/{activity.pk}/" in page.url
    # The unprefixed URL still follows the browser: English here.
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(page.locator("#countdown")).to_contain_text("Starts in")
    assert "/zh-hans/" not in page.url


def test_from_a_chinese_sale_page_the_account_pages_stay_in_chinese(shop, context):
    """The script's account links (login, sign-up, logout) keep the cached page's language."""
    activity = make_activity(started=False)
    UserFactory(username="xiaohong")
    page = context(locale="en-US").new_page()
    page.goto(f"{shop}/zh-hans/seckill/{activity.pk}/")
    back = f"?next=%2Fzh-hans%2Fseckill%2F{activity.pk}%2F"
    expect(page.locator("#account-signup")).to_have_attribute("href", f"/zh-hans/accounts/signup/{back}")
    login = page.locator("#account-login")
    expect(login).to_have_attribute("href", f"/zh-hans/accounts/login/{back}")
    login.click()
    expect(page.locator("h1")).to_have_text("登录")
    page.locator("#id_username").fill("xiaohong")
    page.locator("#id_password").fill("pw-for-tests")
    page.locator("main").get_by_role("button", name="登录").click()
    page.wait_for_url(f"**/zh-hans/seckill/{activity.pk}/")
    page.locator("#account").get_by_role("button", name="退出").click()
    page.wait_for_url(re.compile(r"/zh-hans/$"))
    expect(page.locator("#account")).to_contain_text("登录")


def test_the_sale_pages_switch_is_the_language_of_a_signed_in_shoppers_mails(shop, context):
    """The cached page's switch is a link; it tells the server's switch too (set_language)."""
    activity = make_activity(started=False)
    user, page = logged_in_page(context(locale="en-US"), shop, "lanlan")
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(page.locator("#account")).to_contain_text("Log out")  # /api/me answered: the CSRF cookie is set
    assert AccountProfile.objects.get(user=user).language == "en"
    page.locator("nav.lang").get_by_role("link", name="简体中文").click()
    page.wait_for_url(f"**/zh-hans/seckill/{activity.pk}/")
    wait_until(
        lambda: AccountProfile.objects.get(user=user).language == "zh-hans", timeout=15, what="the mails' language"
    )


@pytest.mark.parametrize("purchase_ran", [True, False], ids=["it-went-through", "it-did-not"])
def test_a_purchase_whose_answer_was_lost_is_settled_by_the_result(purchase_ran, shop, context):
    """The server answers 503 ``outcome_unknown`` when the purchase's reply from Redis was
    lost (tests/promises/test_lost_reply.py). Here the answer the page reads is that one;
    the purchase itself reached the real server (it went through) or did not. The page
    must find out from the result, not tell the shopper to try again blindly."""
    activity, _ = demo_activity(seconds_to_start=-5)
    user, page = logged_in_page(context(), shop, f"unsure-{int(purchase_ran)}")

    def answer_lost(route):
        if purchase_ran:
            sent = route.fetch()  # the real purchase, through the real server
            assert sent.status == 202, sent.text()
        route.fulfill(
            status=503,
            headers={"Retry-After": "2"},
            json={"code": "outcome_unknown", "detail": "Your purchase may or may not have gone through."},
        )

    page.route(re.compile(r".*/purchase$"), answer_lost)
    page.goto(f"{shop}/seckill/{activity.pk}/")
    expect(page.locator("#account")).to_contain_text("Log out")
    button, outcome = page.locator("#buy"), page.locator("#outcome")

    def ordered() -> bool:  # the reservation becomes an order as the drain task would make it
        reservations_drain(activity_id=activity.pk)
        return Order.objects.filter(user=user).exists()

    button.click()
    if purchase_ran:
        expect(outcome).to_contain_text("checking whether it went through")  # the result says: queued
        wait_until(ordered, timeout=30, what="the order")
        expect(outcome).to_contain_text(re.compile(r"You got it! Pay within"))
        expect(outcome.get_by_role("button", name="Pay now")).to_be_visible()
    else:
        expect(outcome).to_contain_text("Your purchase did not go through. You can try again.")
        expect(page.locator("#buy-hint")).to_contain_text(re.compile(r"You can try again in \d+ s"))
        page.unroute(re.compile(r".*/purchase$"))
        expect(button).to_be_enabled(timeout=20_000)  # after the page's 10 s between clicks
        button.click()
        wait_until(ordered, timeout=30, what="the order after trying again")
        expect(outcome).to_contain_text(re.compile(r"You got it! Pay within"))
