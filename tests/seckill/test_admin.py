"""The merchant's admin: create an activity with its stock, watch it, warm it, end it."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from inventory.models import SeckillStock
from orders.models import Order
from orders.services.creation import orders_create_from_reservations
from orders.services.lifecycle import order_pay
from seckill.models import Activity
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining
from seckill.tasks import activity_close_task
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending
from stock.scripts import ScriptCode, run_purchase

from ..factories import make_activity, make_users
from ..helpers import form_data, staff_member, wait_until

CHANGELIST = "/admin/seckill/activity/"


def cell(html: str, column: str, row: int = 0) -> str:
    values = re.findall(rf'<td class="field-{column}[^"]*">(.*?)</td>', html, re.S)
    return values[row].strip()


def run_action(client: Client, action: str, *activities):
    data = {"action": action, "_selected_action": [a.pk for a in activities]}
    return client.post(CHANGELIST, data, follow=True)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.mark.django_db
def test_add_form_creates_the_activity_with_its_stock(merchant):
    assert merchant.get("/admin/seckill/activity/add/").status_code == 200
    response = merchant.post("/admin/seckill/activity/add/", form_data())
    assert response.status_code == 302, response.content.decode()[-3000:]
    activity = Activity.objects.get(title="Admin sale")
    assert (activity.total_stock, activity.safety_stock, activity.per_user_limit, activity.pay_timeout) == (
        25,
        5,
        2,
        600,
    )
    stock = SeckillStock.objects.get(activity=activity)
    assert (stock.total, stock.available) == (25, 25)
    assert activity.status == Activity.Status.SCHEDULED and activity.purchase_token is None
    assert redis_remaining(activity.pk) is None  # loaded by the warm-up, not by saving


@pytest.mark.django_db
@pytest.mark.parametrize(
    "overrides",
    [{"safety_stock": "30"}, {"per_user_limit": "0"}, {"total_stock": "-1"}, {"end_at_0": "2001-01-01"}],
)
def test_add_form_rejects_inconsistent_activities(merchant, overrides):
    response = merchant.post("/admin/seckill/activity/add/", form_data(**overrides))
    assert response.status_code == 200  # the form again, with its errors
    assert "errornote" in response.content.decode()
    assert not Activity.objects.exists() and not SeckillStock.objects.exists()


@pytest.mark.django_db
def test_changelist_shows_one_status_what_is_left_and_the_orders(merchant):
    activity = make_activity(stock=10)
    users = make_users(3)
    for user in users:
        assert run_purchase(stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=1, limit=1).code == 1
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk))
    order_pay(order=Order.objects.filter(activity=activity).first())
    make_activity(stock=4, started=False, warm=False, title="Cold sale")
    make_activity(stock=4, started=False, warm=True, title="Warm sale")
    sold_out = make_activity(stock=1, title="Gone sale")
    run_purchase(stock_redis(), ActivityKeys(sold_out.pk), user_id=users[0].pk, quantity=1, limit=1)

    html = merchant.get(CHANGELIST).content.decode()
    rows = re.findall(r'<th class="field-title"><a [^>]*>(.*?)</a>', html)
    hot, cold, warm, gone = (rows.index(t) for t in ("Test sale", "Cold sale", "Warm sale", "Gone sale"))
    assert cell(html, "stock_left", hot) == "7 / 10"
    assert cell(html, "orders_summary", hot) == '<span class="sale-orders">1 paid<br>2 pending</span>'
    assert cell(html, "stock_left", cold) == "– / 4"
    badges = {row: re.search(r">([a-z ]+)</span>", cell(html, "status_badge", row)).group(1) for row in rows_of(html)}
    assert (badges[hot], badges[cold], badges[warm], badges[gone]) == ("live", "scheduled", "ready to open", "sold out")
    # One status column, not two; no developer words.
    assert "field-phase_display" not in html and "field-status" not in html.replace("field-status_badge", "")
    assert "Redis" not in html
    # Links: the live view, the orders, the report and the shop's page.
    links = cell(html, "links", hot)
    assert f"/admin/seckill/activity/{activity.pk}/live/" in links
    assert f"/admin/orders/order/?activity__id__exact={activity.pk}" in links
    assert f"/admin/orders/reconciliationreport/activity/{activity.pk}/" in links
    assert f"/seckill/{activity.pk}/" in links
    # Filters (in the badge's words) and search.
    scheduled = merchant.get(CHANGELIST, {"sale": "scheduled"}).content.decode()
    assert "Cold sale" in scheduled and "Test sale" not in scheduled and "Warm sale" not in scheduled
    assert "Warm sale" in merchant.get(CHANGELIST, {"sale": "ready to open"}).content.decode()
    live = merchant.get(CHANGELIST, {"sale": "live"}).content.decode()
    assert "Test sale" in live and "Gone sale" in live and "Cold sale" not in live
    found = merchant.get(CHANGELIST, {"q": "Cold"}).content.decode()
    assert "Cold sale" in found and 'field-title"><a href="/admin/seckill/activity/' in found


def rows_of(html: str) -> range:
    return range(len(re.findall(r'<th class="field-title">', html)))


@pytest.mark.django_db
def test_the_change_page_links_to_the_live_view_orders_report_and_site(merchant):
    activity = make_activity(stock=3)
    page = merchant.get(f"/admin/seckill/activity/{activity.pk}/change/").content.decode()
    for url in (
        f"/admin/seckill/activity/{activity.pk}/live/",
        f"/admin/orders/order/?activity__id__exact={activity.pk}",
        f"/admin/orders/reconciliationreport/activity/{activity.pk}/",
        f"/admin/seckill/activity/{activity.pk}/duplicate/",
    ):
        assert f'"{url}"' in page.replace("&amp;", "&"), url
    assert "View on site" in page


@pytest.mark.django_db
def test_duplicate_makes_a_scheduled_copy_starting_in_the_future(merchant):
    original = make_activity(stock=6, safety_stock=1, per_user_limit=2, db_reserve=2)
    Activity.objects.filter(pk=original.pk).update(rate_per_user="3/s", captcha_required=True)
    original.refresh_from_db()
    assert merchant.get(f"/admin/seckill/activity/{original.pk}/duplicate/").status_code == 405
    response = merchant.post(f"/admin/seckill/activity/{original.pk}/duplicate/")
    assert response.status_code == 302
    copy = Activity.objects.exclude(pk=original.pk).get()
    assert response["Location"] == f"/admin/seckill/activity/{copy.pk}/change/"
    assert copy.title == "Test sale (copy)" and copy.status == Activity.Status.SCHEDULED
    assert copy.start_at > timezone.now() + timedelta(minutes=59)
    assert copy.end_at - copy.start_at == original.end_at - original.start_at
    assert (copy.total_stock, copy.safety_stock, copy.per_user_limit, copy.seckill_price) == (6, 1, 2, Decimal("0.10"))
    assert (copy.rate_per_user, copy.captcha_required, copy.purchase_token) == ("3/s", True, None)
    stock = SeckillStock.objects.get(activity=copy)
    assert (copy.db_reserve, stock.available, stock.reserve) == (2, 6, 2), "the outage reserve is the merchant's too"
    # The action does the same for several.
    run_action(merchant, "duplicate", original, copy)
    assert Activity.objects.count() == 4
    assert Activity.objects.filter(title="Test sale (copy)").count() == 3  # a copy of a copy keeps one suffix


@pytest.mark.django_db
def test_warm_up_action_loads_total_less_safety_and_refuses_a_live_one(merchant):
    upcoming = make_activity(stock=20, safety_stock=3, started=False, warm=False)
    response = run_action(merchant, "warm_up", upcoming)
    assert any("stock loaded: 17 units on sale" in m for m in messages_of(response)), messages_of(response)
    assert redis_remaining(upcoming.pk) == 17
    upcoming.refresh_from_db()
    assert upcoming.status == Activity.Status.WARMED

    live = make_activity(stock=5)
    stock_redis().set(ActivityKeys(live.pk).stock, 2)
    response = run_action(merchant, "warm_up", live)
    assert any("loading the stock failed" in m and "force" in m for m in messages_of(response)), messages_of(response)
    assert redis_remaining(live.pk) == 2
    response = run_action(merchant, "force_rewarm", live)
    said = messages_of(response)
    assert any("stock loaded: 5 units on sale" in m for m in said) and not any("{" in m for m in said), said
    assert redis_remaining(live.pk) == 5


@pytest.mark.django_db(transaction=True)
def test_editing_the_total_of_an_upcoming_sale_before_the_warm_up_and_not_after(merchant):
    activity = make_activity(stock=10, started=False, warm=False)
    url = f"/admin/seckill/activity/{activity.pk}/change/"
    stock_form = {"stock-TOTAL_FORMS": "1", "stock-INITIAL_FORMS": "1", "stock-0-id": activity.stock.pk}
    data = form_data(
        title=activity.title,
        product=activity.product_id,
        total_stock="6",
        safety_stock="1",
        per_user_limit="1",
        **stock_form,
        **{"stock-0-activity": activity.pk},
    )
    response = merchant.post(url, data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert SeckillStock.objects.get(activity=activity).total == 6
    run_action(merchant, "warm_up", activity)
    assert redis_remaining(activity.pk) == 5  # 6 - safety 1: the warm-up loads what the database has

    # Once warmed (and once the sale runs), the stock fields are read-only.
    for locked in (Activity.objects.get(pk=activity.pk), make_activity(stock=10)):
        page = merchant.get(f"/admin/seckill/activity/{locked.pk}/change/").content.decode()
        assert 'name="total_stock"' not in page and 'name="title"' in page


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_end_now_and_clean_up_drains_the_log_and_removes_the_keys(merchant, celery_worker):
    activity = make_activity(stock=10)
    users = make_users(4)
    entries = []
    for user in users:
        reply = run_purchase(stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=1, limit=1)
        assert reply.code == ScriptCode.RESERVED
        entries.append(reply.reservation_id)
    # Two became orders; two are still only in the log (their tasks were lost).
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk)[:2])

    response = run_action(merchant, "end_and_clean_up", activity)
    assert any("ended; the last orders" in m for m in messages_of(response)), messages_of(response)
    activity.refresh_from_db()
    assert activity.end_at <= timezone.now()  # selling stopped at once

    keys = ActivityKeys(activity.pk)
    wait_until(
        lambda: Activity.objects.get(pk=activity.pk).status == Activity.Status.ENDED,
        timeout=120,
        what="the close task to run on the worker",
    )
    # The status turns ENDED just before the keys go (nothing writes them from then on).
    wait_until(lambda: stock_redis().exists(*keys.all()) == 0, timeout=60, what="the keys to be removed")
    assert sorted(Order.objects.filter(activity=activity).values_list("reservation_id", flat=True)) == sorted(entries)
    assert SeckillStock.objects.get(activity=activity).available == 6
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["redis_remaining"] is None


@pytest.mark.django_db(transaction=True)
def test_close_task_run_synchronously_waits_for_the_end_then_cleans_up():
    activity = make_activity(stock=3)
    (user,) = make_users(1)
    run_purchase(stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=1, limit=1)
    now = timezone.now()
    Activity.objects.filter(pk=activity.pk).update(
        start_at=now - timedelta(minutes=2), end_at=now - timedelta(minutes=1)
    )
    result = activity_close_task.apply(args=[activity.pk]).get()
    assert result["replay"]["created"] == 1
    assert result["reconciliation"]["identity_ok"]
    assert stock_redis().exists(*ActivityKeys(activity.pk).all()) == 0
    assert Activity.objects.get(pk=activity.pk).status == Activity.Status.ENDED
    assert Order.objects.filter(activity=activity, user=user).count() == 1


@pytest.mark.django_db
def test_end_now_on_a_sale_not_started_says_why_and_changes_nothing(merchant):
    upcoming = make_activity(stock=3, started=False, warm=True)
    response = run_action(merchant, "end_and_clean_up", upcoming)
    assert response.status_code == 200
    said = messages_of(response)
    assert any("has not started" in m for m in said), said
    stored = Activity.objects.get(pk=upcoming.pk)
    assert (stored.start_at, stored.end_at, stored.status) == (upcoming.start_at, upcoming.end_at, upcoming.status)


@pytest.mark.django_db
def test_deleting_a_live_sale_says_why_it_cannot_and_a_scheduled_one_goes(merchant):
    live = make_activity(stock=3)
    url = f"/admin/seckill/activity/{live.pk}/delete/"
    page = merchant.get(url).content.decode()
    assert "permission" not in page and "cannot be deleted" in page and "on sale now" in page
    assert merchant.post(url, {"post": "yes"}).status_code == 200  # the same explanation, nothing deleted
    assert Activity.objects.filter(pk=live.pk).exists()
    chosen = run_action(merchant, "delete_selected", live).content.decode()
    assert "permission" not in chosen and "on sale now" in chosen

    later = make_activity(stock=3, started=False, warm=False, title="Later sale")
    page = merchant.get(f"/admin/seckill/activity/{later.pk}/delete/").content.decode()
    assert "Are you sure" in page and "permission" not in page
    assert merchant.post(f"/admin/seckill/activity/{later.pk}/delete/", {"post": "yes"}).status_code == 302
    assert (
        not Activity.objects.filter(pk=later.pk).exists() and not SeckillStock.objects.filter(activity=later).exists()
    )


@pytest.mark.django_db
def test_the_sale_form_speaks_to_merchants_and_the_admin_wears_the_shops_name(merchant):
    page = merchant.get("/admin/seckill/activity/add/").content.decode()
    for word in ("SECKILL_", "GATES.md", "Redis", "Seckill price", "Django administration"):
        assert word not in page, word
    assert "Sale price" in page and "Flash sale" in page
    # A live sale's page shows the locked fields read-only, in the same words.
    live = make_activity(stock=3, safety_stock=1)
    page = merchant.get(f"/admin/seckill/activity/{live.pk}/change/").content.decode()
    for word in ("SECKILL_", "Redis", "Seckill price"):
        assert word not in page, word
    assert "Sale price" in page and "¥0.10" in page and 'name="seckill_price"' not in page


def staff_client(role: str) -> Client:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user(f"{role}-x", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=f"{role}s"))
    client = Client()
    client.force_login(user)
    return client


def offered(client: Client) -> list[str]:
    page = client.get(CHANGELIST).content.decode()
    select = re.search(r'<select name="action"[^>]*>(.*?)</select>', page, re.S)
    return [v for v in re.findall(r'<option value="([^"]*)"', select.group(1)) if v] if select else []


@pytest.mark.django_db
def test_each_role_is_offered_only_the_actions_it_may_run(merchant):
    make_activity(stock=2)
    everything = [
        "delete_selected",
        "warm_up",
        "force_rewarm",
        "end_and_clean_up",
        "publish",
        "duplicate",
        "pause_room",
        "resume_room",
    ]
    assert offered(merchant) == everything  # a superuser
    merchant_client = staff_client("merchant")
    Activity.objects.update(owner=int(merchant_client.session["_auth_user_id"]))  # a merchant lists only theirs
    assert offered(merchant_client) == everything[1:]  # no deleting
    assert offered(staff_client("reviewer")) == []  # looks only


@pytest.mark.django_db
def test_a_reviewer_cannot_duplicate_and_a_missing_sale_is_404(merchant):
    activity = make_activity(stock=2)
    reviewer = staff_client("reviewer")
    assert reviewer.post(f"/admin/seckill/activity/{activity.pk}/duplicate/").status_code == 403
    assert "Duplicate sale" not in reviewer.get(f"/admin/seckill/activity/{activity.pk}/change/").content.decode()
    assert merchant.post("/admin/seckill/activity/999999/duplicate/").status_code == 404
    assert Activity.objects.count() == 1


# --- the sale's owner ---------------------------------------------------------------------


def change_form(activity, **overrides) -> dict:
    """The change form of a scheduled ``activity`` as its page posts it, with ``overrides``."""
    start, end = timezone.localtime(activity.start_at), timezone.localtime(activity.end_at)
    stored = {
        "title": activity.title,
        "product": activity.product_id,
        "start_at_0": start.strftime("%Y-%m-%d"),
        "start_at_1": start.strftime("%H:%M:%S"),
        "end_at_0": end.strftime("%Y-%m-%d"),
        "end_at_1": end.strftime("%H:%M:%S"),
        "total_stock": str(activity.total_stock),
        "safety_stock": str(activity.safety_stock),
        "per_user_limit": str(activity.per_user_limit),
        "stock-TOTAL_FORMS": "1",
        "stock-INITIAL_FORMS": "1",
        "stock-0-id": str(SeckillStock.objects.get(activity=activity).pk),
        "stock-0-activity": str(activity.pk),
    }
    return form_data(**{**stored, **overrides})


@pytest.mark.django_db
def test_a_new_sale_belongs_to_the_merchant_who_made_it_or_to_whom_a_superuser_chose():
    alpha, alpha_client = staff_member("merchants")
    bravo, _ = staff_member("merchants")
    _, root = staff_member(None)

    page = alpha_client.get("/admin/seckill/activity/add/").content.decode()
    assert 'name="owner"' not in page  # read-only for a merchant
    forged = alpha_client.post("/admin/seckill/activity/add/", form_data(title="Alpha's", owner=str(bravo.pk)))
    assert forged.status_code == 302, forged.content.decode()[-3000:]
    assert Activity.objects.get(title="Alpha's").owner == alpha

    assert 'name="owner"' in root.get("/admin/seckill/activity/add/").content.decode()
    assert root.post("/admin/seckill/activity/add/", form_data(title="Bravo's", owner=str(bravo.pk))).status_code == 302
    assert Activity.objects.get(title="Bravo's").owner == bravo
    assert root.post("/admin/seckill/activity/add/", form_data(title="The shop's")).status_code == 302
    assert Activity.objects.get(title="The shop's").owner is None  # seen only by staff who see every sale


@pytest.mark.django_db
def test_only_a_superuser_hands_a_sale_to_another_merchant():
    alpha, alpha_client = staff_member("merchants")
    bravo, bravo_client = staff_member("merchants")
    _, root = staff_member(None)
    activity = make_activity(stock=5, started=False, warm=False, owner=alpha)
    url = f"/admin/seckill/activity/{activity.pk}/change/"

    page = alpha_client.get(url).content.decode()
    assert 'name="owner"' not in page and alpha.username in page  # shown, not editable
    forged = alpha_client.post(url, change_form(activity, title="Renamed", owner=str(bravo.pk)))
    assert forged.status_code == 302, forged.content.decode()[-3000:]
    activity.refresh_from_db()
    assert (activity.title, activity.owner) == ("Renamed", alpha)  # the edit saved, the owner kept

    assert 'name="owner"' in root.get(url).content.decode()
    assert root.post(url, change_form(activity, owner=str(bravo.pk))).status_code == 302
    activity.refresh_from_db()
    assert activity.owner == bravo
    # Now it is Bravo's: Alpha's page answers as for a sale that does not exist.
    missing = alpha_client.get("/admin/seckill/activity/987654321/change/")
    gone = alpha_client.get(url)
    assert (gone.status_code, gone["Location"]) == (missing.status_code, missing["Location"])
    assert alpha_client.get(f"/admin/seckill/activity/{activity.pk}/live/").status_code == 404
    assert bravo_client.get(url).status_code == 200
