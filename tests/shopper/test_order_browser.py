"""The orders in real Chromium (Playwright) against gunicorn: the shipping address asked
for before payment, the order page and its timeline, cancel with a confirmation."""

import re
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from orders.models import Order, ShippingAddress
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot
from tests.factories import ProductFactory, UserFactory, make_activity

pytestmark = pytest.mark.slow


def shopper_with_an_order(context, shop_server, username: str):
    """A signed-in shopper (no shipping address yet) with a pending order."""
    user = UserFactory(username=username)
    activity = make_activity(
        stock=3, title="Phone for a yuan", product=ProductFactory(name="Demo phone"), seckill_price=Decimal("1.00")
    )
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    order = Order.objects.get(activity=activity, user=user)
    page = context.new_page()
    page.goto(f"{shop_server}/accounts/login/?next=/orders/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill("pw-for-tests")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/orders/")
    return user, order, page


def test_the_address_is_asked_for_before_payment(shop_server, browser_context, screenshot_dir):
    user, order, page = shopper_with_an_order(browser_context, shop_server, "erin")
    row = page.locator(f"#order-{order.order_no}")
    expect(row).to_contain_text("Demo phone")
    row.get_by_role("button", name="Pay").click()

    # No address yet: the form, which comes back to the order.
    page.wait_for_url(re.compile(r"/orders/address/\?next=%2Forders%2F"))
    page.get_by_label("Recipient").fill("李雷")
    page.get_by_label("Phone").fill("call me")  # not a phone number
    page.get_by_label("City").fill("北京")
    page.get_by_label("Address", exact=True).fill("朝阳区建国路 88 号")
    page.get_by_label("Postal code").fill("100022")
    page.get_by_role("button", name="Save address").click()
    expect(page.locator("#id_phone-error")).to_contain_text("phone number")
    assert not ShippingAddress.objects.filter(user=user).exists()
    page.get_by_label("Phone").fill("138 0013 8000")
    page.screenshot(path=str(screenshot_dir / "order-address-form.png"))
    page.get_by_role("button", name="Save address").click()

    page.wait_for_url(f"**/orders/{order.order_no}/")
    expect(page.locator("#order-address")).to_contain_text("朝阳区建国路 88 号")
    page.locator("#order-pay").click()
    page.wait_for_url("**/payments/simulated/**")
    page.locator("#gateway-succeeded").click()
    page.wait_for_url("**/orders/?paid=*")
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.shipping_address["city"] == "北京"

    # Back on the provider's page of a paid order: nothing to pay there any more.
    page.go_back()
    page.reload()
    expect(page.locator("#gateway-closed")).to_contain_text("already paid")
    expect(page.locator("#gateway-succeeded")).to_have_count(0)


def test_the_order_page_shows_the_order_its_address_and_timeline(shop_server, chromium_browser, screenshot_dir):
    context = chromium_browser.new_context(viewport={"width": 390, "height": 844}, locale="en-US")
    try:
        user, order, page = shopper_with_an_order(context, shop_server, "frank")
        ShippingAddress.objects.create(
            user=user,
            recipient="Frank Li",
            phone="+852 5123 4567",
            country="HK",
            city="Hong Kong",
            line1="1 Queen's Road Central",
        )
        page.locator(f"#order-{order.order_no} a.order-link").click()
        page.wait_for_url(f"**/orders/{order.order_no}/")
        expect(page.locator("h1")).to_have_text("Demo phone")
        expect(page.locator("#order-status")).to_have_text("pending payment")
        expect(page.locator("#order-address")).to_contain_text("1 Queen's Road Central")
        timeline = page.locator("#timeline li")
        expect(timeline).to_have_count(2)
        expect(timeline.nth(0)).to_contain_text("reserved")
        expect(timeline.nth(1)).to_contain_text("Order placed")
        expect(page.locator("#order-pay")).to_be_in_viewport()  # the action, without scrolling at 390 px
        page.screenshot(path=str(screenshot_dir / "order-page.png"), full_page=True)

        assert page.goto(f"{shop_server}/orders/A999-0-0-0/").status == 404
    finally:
        context.close()


def test_cancelling_asks_first_and_works_without_javascript(shop_server, chromium_browser):
    context = chromium_browser.new_context(viewport={"width": 1000, "height": 760}, java_script_enabled=False)
    try:
        _user, order, page = shopper_with_an_order(context, shop_server, "gina")
        page.locator(f"#order-{order.order_no}").get_by_role("link", name="Cancel").click()
        page.wait_for_url(f"**/orders/{order.order_no}/cancel/")
        expect(page.locator("h1")).to_have_text("Cancel the order?")
        order.refresh_from_db()
        assert order.status == Order.Status.PENDING

        page.locator("#cancel-keep").click()  # changed their mind
        page.wait_for_url(f"**/orders/{order.order_no}/")
        order.refresh_from_db()
        assert order.status == Order.Status.PENDING

        page.locator("#order-cancel").click()
        page.locator("#cancel-confirm").click()
        page.wait_for_url(f"**/orders/{order.order_no}/")
        expect(page.locator("#order-status")).to_have_text("cancelled")
        expect(page.locator("#timeline")).to_contain_text("Cancelled by you")
        order.refresh_from_db()
        assert order.status == Order.Status.CANCELLED and order.cancel_reason == "shopper"
    finally:
        context.close()


def test_cancelling_the_won_unit_on_the_sale_page_asks_first(shop_server, browser_context):
    _user, order, page = shopper_with_an_order(browser_context, shop_server, "hana")
    page.goto(f"{shop_server}/seckill/{order.activity_id}/")
    outcome = page.locator("#outcome")
    expect(outcome).to_contain_text(re.compile(r"Pay within \d\d:\d\d"), timeout=30_000)
    outcome.get_by_role("button", name="Cancel order").click()
    page.wait_for_url(f"**/orders/{order.order_no}/cancel/")
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING  # asked, not done
    page.locator("#cancel-confirm").click()
    page.wait_for_url(f"**/orders/{order.order_no}/")
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
