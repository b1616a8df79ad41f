# ruff: noqa: F811 - the browser's fixtures, imported, are the tests' arguments
"""A failed payment and the orders table in real Chromium at 1280x800 and 390x844 (issue 42):
back from the provider's "Payment failed", My orders says so and the order's timeline shows
the failed attempt; in Chinese (/zh-hans/orders/) "数量" and "待付款" stay on one line and
nothing scrolls sideways. Screenshots land in SECKILL_SCREENSHOT_DIR when it is set."""

from decimal import Decimal

import pytest
from playwright.sync_api import expect

from orders.models import Order
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot
from tests.factories import ProductFactory, UserFactory, make_activity
from tests.orders.addresses import give_address
from tests.shopper.conftest import chromium_browser, collected_static, screenshot_dir, shop_server  # noqa: F401
from tests.shopper.test_browser import shot

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
# How many lines an element's text takes.
LINES = """el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
}"""


def order_of(user, title: str, product: str) -> Order:
    activity = make_activity(stock=3, title=title, product=ProductFactory(name=product), seckill_price=Decimal("1.00"))
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    return Order.objects.get(activity=activity, user=user)


def signed_in_with_an_order(context, shop, username: str):
    """A shopper with a pending order and, before it, a paid one with long names (the
    table's widest rows: its short headings are the ones squeezed)."""
    user = UserFactory(username=username)
    give_address(user)
    paid = order_of(user, "Ultra-thin 15.6-inch laptop for a yuan, today only", "Ultra-thin 15.6-inch laptop, 32 GB")
    Order.objects.filter(pk=paid.pk).update(status=Order.Status.PAID, paid_at=paid.created_at)
    order = order_of(user, "Phone for a yuan", "Demo phone")
    page = context.new_page()
    page.goto(f"{shop}/accounts/login/?next=/orders/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill("pw-for-tests")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/orders/")
    return order, page


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]


@pytest.mark.parametrize("size", SIZES)
def test_a_failed_payment_says_so_and_the_chinese_table_does_not_wrap(
    shop_server, chromium_browser, screenshot_dir, size
):
    context = chromium_browser.new_context(viewport=SIZES[size], locale="en-US", is_mobile=size == "phone")
    try:
        order, page = signed_in_with_an_order(context, shop_server, f"payer-{size}")
        page.locator(f"#order-{order.order_no}").get_by_role("button", name="Pay").click()
        page.wait_for_url("**/payments/simulated/**")
        expect(page.locator("#gateway-order")).to_have_text(f"Order {order.order_no}")
        page.locator("#gateway-failed").click()
        page.wait_for_url(f"**/orders/?failed={order.order_no}")
        message = page.locator(".messages .msg-error")
        expect(message).to_contain_text(f"The payment for order {order.order_no} did not go through")
        assert fits(page)
        shot(page, screenshot_dir, f"payment-{size}-failed")
        page.goto(f"{shop_server}/orders/{order.order_no}/")
        expect(page.locator("#timeline li[data-outcome=failed]")).to_contain_text("Payment 1: failed")
        expect(page.locator("#timeline")).not_to_contain_text("Payment started")

        # The same table in Chinese, by its URL: the short words keep to one line.
        page.goto(f"{shop_server}/zh-hans/orders/")
        badge = page.locator(f"#order-{order.order_no} .badge.status")
        expect(badge).to_have_text("待付款")
        assert badge.evaluate(LINES) == 1
        if size == "desktop":  # a phone shows no table head: each cell carries its label
            quantity = page.locator("thead th", has_text="数量")
            assert quantity.evaluate(LINES) == 1
        assert fits(page)
        shot(page, screenshot_dir, f"orders-{size}-zh-hans")
    finally:
        context.close()
