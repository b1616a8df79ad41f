"""The merchant's live view of a sale (seckill.admin.dashboard, the admin's live page and its
JSON): sold and left, orders by state, revenue, the pace, refused purchases, anomalies;
the one status word; merchants and reviewers may watch, shoppers may not."""

import uuid
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from core.metrics import PURCHASES
from orders.models import AnomalyOrder, Order
from orders.services.creation import orders_create_from_reservations
from orders.services.lifecycle import order_cancel, order_pay
from seckill.admin.dashboard import SaleStatus, live_figures, purchase_refusals, sale_status
from seckill.models import Activity
from stock.keys import ActivityKeys
from stock.redis_client import reset_stock_redis, stock_redis
from stock.reservations import reservations_pending
from stock.scripts import run_purchase
from tests.shopper.conftest import chromium_browser, collected_static, shop_server  # noqa: F401 - the browser's fixtures

from ..factories import ProductFactory, make_activity, make_users
from ..helpers import free_port


def staff(role: str, *, owns=None) -> Client:
    """A logged-in member of the staff group ``role + "s"`` (orders/migrations/0003_staff_groups.py),
    owner of the sale ``owns`` (a merchant sees only their own)."""
    user = get_user_model().objects.create_user(f"{role}-{uuid.uuid4().hex[:8]}", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=f"{role}s"))
    if owns is not None:
        Activity.objects.filter(pk=owns.pk).update(owner=user)
    client = Client()
    client.force_login(user)
    return client


def buy(activity, users, *, ordered: int | None = None):
    for user in users:
        assert run_purchase(stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=1, limit=1).code == 1
    entries = reservations_pending(activity_id=activity.pk)
    orders_create_from_reservations(activity_id=activity.pk, entries=entries[:ordered])


@pytest.mark.django_db
def test_the_figures_of_a_running_sale(django_capture_on_commit_callbacks):
    activity = make_activity(stock=5, seckill_price=Decimal("9.50"))
    buy(activity, make_users(4), ordered=3)  # one reservation still in the log
    first, second, _ = Order.objects.filter(activity=activity).order_by("pk")
    order_pay(order=first)
    with django_capture_on_commit_callbacks(execute=True):  # the unit goes back to Redis after the commit
        order_cancel(order=second, reason="user")

    figures = live_figures(activity=activity)
    assert figures["status"] == SaleStatus.LIVE
    assert figures["orders"] == {"paid": 1, "pending": 1, "cancelled": 1, "paid_units": 1, "pending_units": 1}
    assert figures["reserved_not_ordered"] == 1
    # Sold: paid 1 + pending 1 + reserved 1; the cancelled unit is back on sale.
    assert (figures["sold"], figures["left"], figures["total"]) == (3, 2, 5)
    assert figures["revenue"] == "9.50" and figures["awaiting_payment"] == "9.50"
    assert figures["orders_last_minute"] == 3 and len(figures["orders_per_minute"]) == 10
    assert sum(m["orders"] for m in figures["orders_per_minute"]) == 3
    assert figures["sell_out"].startswith("at this pace, in about")


@pytest.mark.django_db
def test_sold_out_says_when_and_comes_back_when_a_unit_returns(django_capture_on_commit_callbacks):
    activity = make_activity(stock=2)
    buy(activity, make_users(2))
    figures = live_figures(activity=activity)
    assert figures["status"] == SaleStatus.SOLD_OUT and figures["left"] == 0
    assert figures["sell_out"].startswith("sold out") and "after the start" in figures["sell_out"]

    with django_capture_on_commit_callbacks(execute=True):
        order_cancel(order=Order.objects.filter(activity=activity).first(), reason="user")
    figures = live_figures(activity=activity)
    assert figures["status"] == SaleStatus.LIVE and figures["left"] == 1


@pytest.mark.django_db
def test_the_status_word_through_the_lifecycle():
    scheduled = make_activity(started=False, warm=False)
    assert sale_status(activity=scheduled, remaining=None) == SaleStatus.SCHEDULED
    warmed = make_activity(started=False, warm=True)
    assert sale_status(activity=warmed, remaining=10) == SaleStatus.WARMING
    live = make_activity()
    assert sale_status(activity=live, remaining=3) == SaleStatus.LIVE
    assert sale_status(activity=live, remaining=0) == SaleStatus.SOLD_OUT
    live.status = live.Status.ENDED
    assert sale_status(activity=live, remaining=0) == SaleStatus.ENDED


@pytest.mark.django_db
def test_refused_purchases_and_open_anomalies_are_shown():
    activity = make_activity(stock=3)
    shop_before = purchase_refusals().by_code.get("sold_out", 0)
    PURCHASES.labels(code="sold_out", activity=str(activity.pk)).inc(7)
    PURCHASES.labels(code="queued", activity=str(activity.pk)).inc(2)  # sold something: not a refusal
    AnomalyOrder.objects.create(kind=AnomalyOrder.Kind.DRIFT, activity=activity, details={})
    figures = live_figures(activity=activity)
    assert figures["refusals"]["by_code"] == {"sold_out": 7}  # the sale's own
    assert purchase_refusals().by_code["sold_out"] == shop_before + 7  # and in the shop's figure
    assert figures["anomalies"]["open"] == 1
    assert list(figures["anomalies"]["by_kind"].values()) == [1]


@pytest.mark.django_db
def test_the_page_and_its_json_for_each_role(merchant):
    activity = make_activity(stock=4)
    buy(activity, make_users(1))
    page = f"/admin/seckill/activity/{activity.pk}/live/"
    data = f"/admin/seckill/activity/{activity.pk}/live.json"
    for client in (merchant, staff("merchant", owns=activity), staff("reviewer")):
        html = client.get(page)
        assert html.status_code == 200
        body = html.content.decode()
        assert 'data-url="' + data + '"' in body and "seckill/admin/live.js" in body
        assert '<meter min="0" max="4" value="1"' in body
        answer = client.get(data)
        assert answer.status_code == 200 and "no-store" in answer["Cache-Control"]
        assert answer.json()["sold"] == 1 and answer.json()["status"] == "live"
    # Links only to what the role may open: a reviewer may review anomalies, a merchant may not.
    reviewer = staff("reviewer").get(page).content.decode()
    as_merchant = staff("merchant", owns=activity).get(page).content.decode()
    assert "Review the anomalies" in reviewer and "Review the anomalies" not in as_merchant
    # Both may read the sale's report and see its orders.
    for body in (reviewer, as_merchant):
        assert f"/admin/orders/reconciliationreport/activity/{activity.pk}/" in body
        assert f"/admin/orders/order/?activity__id__exact={activity.pk}" in body


@pytest.mark.django_db
def test_shoppers_and_strangers_cannot_watch_and_a_missing_sale_is_404(merchant):
    activity = make_activity(stock=2)
    shopper = Client()
    shopper.force_login(get_user_model().objects.create_user("shopper", password="pw"))
    for client in (Client(), shopper):
        answer = client.get(f"/admin/seckill/activity/{activity.pk}/live.json")
        assert answer.status_code == 302 and "/login/" in answer["Location"]
    assert merchant.get("/admin/seckill/activity/999999/live.json").status_code == 404
    assert merchant.get("/admin/seckill/activity/999999/live/").status_code == 404


@pytest.mark.slow
def test_in_chromium_the_list_fits_1280px_and_the_live_view_refreshes_by_itself(shop_server, chromium_browser):  # noqa: F811
    from playwright.sync_api import expect

    # Fixed names: the factory's numbered product names grow over a long test run.
    product = ProductFactory(name="Demo phone with a long product name 256GB")
    activity = make_activity(stock=6, title="A sale with a long enough title to fill its column", product=product)
    make_activity(stock=3, started=False, warm=False, title="Later sale", product=product)
    buy(activity, make_users(1))
    get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-boss-1234")
    context = chromium_browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    page = context.new_page()
    page.goto(f"{shop_server}/admin/login/?next=/admin/seckill/activity/")
    page.fill("#id_username", "boss")
    page.fill("#id_password", "pw-boss-1234")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    sideways = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    # The admin scrolls a wide table inside its box (#changelist .results), not the page.
    inside = (
        "(() => { const box = document.querySelector('#changelist .results');"
        " return box.scrollWidth - box.clientWidth; })()"
    )
    assert page.evaluate(sideways) <= 0 and page.evaluate(inside) <= 0, "the activity list scrolls sideways at 1280 px"
    assert page.locator(".field-status_badge .sale-badge").all_inner_texts() == ["scheduled", "live"]

    page.goto(f"{shop_server}/admin/seckill/activity/{activity.pk}/live/")
    assert page.inner_text('[data-field="sold"]') == "1"
    assert page.evaluate(sideways) <= 0, "the live view scrolls sideways at 1280 px"
    buy(activity, make_users(2, prefix="later"))  # two more, while the page is open
    # The page asks for the figures every few seconds: no reload.
    expect(page.locator('[data-field="sold"]')).to_have_text("3", timeout=30_000)
    assert page.inner_text('[data-field="orders.pending"]') == "3"
    assert page.get_attribute('[data-field="sold_meter"]', "value") == "3"
    assert int(page.get_attribute(".sale-board", "data-refreshed")) >= 1
    context.close()


@pytest.mark.django_db
def test_with_the_stock_redis_away_the_list_and_the_live_view_still_answer(merchant, settings):
    activity = make_activity(stock=4)
    buy(activity, make_users(1))
    settings.SECKILL_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    reset_stock_redis()
    try:
        assert merchant.get("/admin/seckill/activity/").status_code == 200
        page = merchant.get(f"/admin/seckill/activity/{activity.pk}/live/")
        assert page.status_code == 200 and "left as the database counts it" in page.content.decode()
        figures = merchant.get(f"/admin/seckill/activity/{activity.pk}/live.json").json()
        # What is left then comes from the database; the orders from the database as ever.
        assert figures["left_source"] == "database" and figures["orders"]["pending"] == 1
    finally:
        reset_stock_redis()
