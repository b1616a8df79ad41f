"""Staff in admin: the groups made by the data migration, what each may do, the anomaly
evidence and actions, the report page; and shoppers kept out of each other's orders."""

import time

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from inventory.models import SeckillStock, StockMovement
from orders.models import AnomalyOrder, Order
from orders.services.anomalies import anomaly_record
from seckill.models import Activity
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import staff_groups_create, staff_member
from ..paying import pay_through_provider
from .helpers import buy, reserve

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def staff_groups():
    staff_groups_create()


def _activity_form(activity) -> dict:
    return {
        "title": "Renamed",
        "product": activity.product_id,
        "seckill_price": "0.20",
        "start_at_0": activity.start_at.strftime("%Y-%m-%d"),
        "start_at_1": activity.start_at.strftime("%H:%M:%S"),
        "end_at_0": activity.end_at.strftime("%Y-%m-%d"),
        "end_at_1": activity.end_at.strftime("%H:%M:%S"),
        "total_stock": activity.total_stock,
        "safety_stock": 0,
        "shards": 1,
        "per_user_limit": 1,
        "pay_timeout": 900,
        "stock-TOTAL_FORMS": 1,
        "stock-INITIAL_FORMS": 1,
        "stock-MIN_NUM_FORMS": 0,
        "stock-MAX_NUM_FORMS": 1,
        "stock-0-id": SeckillStock.objects.get(activity=activity).pk,
        "stock-0-activity": activity.pk,
    }


def _anomaly(activity, user, order=None):
    anomaly, _ = anomaly_record(
        kind=AnomalyOrder.Kind.REPLAY_EXHAUSTED if order is None else AnomalyOrder.Kind.PAID_NOT_DEDUCTED,
        activity_id=activity.pk,
        order=order,
        fault_key=f"test:{user.pk}",
        details={"quantity": 1},
    )
    if order is None:
        AnomalyOrder.objects.filter(pk=anomaly.pk).update(user=user)
        anomaly.refresh_from_db()
    return anomaly


def test_the_groups_exist_with_their_permissions():
    merchants = set(Group.objects.get(name="merchants").permissions.values_list("codename", flat=True))
    reviewers = set(Group.objects.get(name="reviewers").permissions.values_list("codename", flat=True))
    assert {"add_activity", "change_activity", "view_activity", "add_product", "change_product"} <= merchants
    assert not {p for p in merchants if p.endswith("anomalyorder") or p.endswith("reconciliationreport")}
    assert {"view_anomalyorder", "change_anomalyorder", "view_reconciliationreport", "view_activity"} <= reviewers
    assert "change_activity" not in reviewers and "add_activity" not in reviewers


def test_a_reviewer_sees_activities_but_cannot_change_them():
    activity = make_activity(stock=5, warm=False)
    _, client = staff_member("reviewers")
    url = reverse("admin:seckill_activity_change", args=[activity.pk])
    assert client.get(url).status_code == 200
    assert client.post(url, _activity_form(activity)).status_code == 403
    assert Activity.objects.get(pk=activity.pk).title == activity.title
    # Nor through the list actions (warm-up, end now).
    changelist = reverse("admin:seckill_activity_changelist")
    client.post(changelist, {"action": "end_and_clean_up", "_selected_action": [activity.pk]})
    assert Activity.objects.get(pk=activity.pk).end_at == activity.end_at
    assert client.get(reverse("admin:seckill_activity_add")).status_code == 403


def test_a_merchant_changes_activities_but_cannot_resolve_an_anomaly():
    merchant, client = staff_member("merchants")
    # Theirs, and not yet locked: its price may change.
    activity = make_activity(stock=5, warm=False, started=False, owner=merchant)
    (shopper,) = make_users(1)
    anomaly = _anomaly(activity, shopper)
    url = reverse("admin:seckill_activity_change", args=[activity.pk])
    response = client.post(url, _activity_form(activity))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Activity.objects.get(pk=activity.pk).title == "Renamed"
    act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "resolve"])
    assert client.post(act, {"note": "fine"}).status_code == 403
    assert client.get(reverse("admin:orders_anomalyorder_change", args=[anomaly.pk])).status_code == 403
    # The report of a sale they run is theirs to read (the reconciliation runs are not).
    assert client.get(reverse("admin:orders_reconciliationreport_activity", args=[activity.pk])).status_code == 200
    assert AnomalyOrder.objects.get(pk=anomaly.pk).status == AnomalyOrder.Status.OPEN


def test_a_shopper_reaches_none_of_admin():
    activity = make_activity(stock=5, warm=False)
    (shopper,) = make_users(1)
    anomaly = _anomaly(activity, shopper)
    client = Client()
    client.force_login(shopper)
    urls = [
        reverse("admin:index"),
        reverse("admin:seckill_activity_change", args=[activity.pk]),
        reverse("admin:orders_anomalyorder_change", args=[anomaly.pk]),
        reverse("admin:orders_reconciliationreport_changelist"),
        reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]),
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    response = client.post(reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "resolve"]), {"note": "x"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert AnomalyOrder.objects.get(pk=anomaly.pk).status == AnomalyOrder.Status.OPEN


def test_one_shopper_never_sees_pays_or_cancels_anothers_order():
    activity = make_activity(stock=5, pay_timeout=600)
    owner, other = make_users(2)
    (order,) = buy(activity, [owner])
    client = APIClient()
    client.force_authenticate(other)
    assert client.get(f"/api/orders/{order.order_no}/").status_code == 404
    assert client.post(f"/api/orders/{order.order_no}/pay").status_code == 404
    assert client.post(f"/api/orders/{order.order_no}/cancel").status_code == 404
    assert client.get("/api/orders/").json()["count"] == 0
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING and redis_remaining(activity.pk) == 4


def test_a_reviewer_reads_the_evidence_and_resolves_with_a_note():
    activity = make_activity(stock=5, pay_timeout=600)
    (shopper,) = make_users(1)
    (order,) = buy(activity, [shopper])
    pay_through_provider(order)
    StockMovement.objects.filter(order=order).delete()
    reconcile(activity_id=activity.pk)
    anomaly = AnomalyOrder.objects.get(activity=activity, kind=AnomalyOrder.Kind.PAID_NOT_DEDUCTED)
    reviewer, client = staff_member("reviewers")

    page = client.get(reverse("admin:orders_anomalyorder_change", args=[anomaly.pk])).content.decode()
    assert "live counter&#x27;s records" in page and order.order_no in page
    assert "the shopper&#x27;s reservation" in page
    assert order.reservation_id in page  # the participant's reservation, from Redis
    assert "Resolve with note" in page

    act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "resolve"])
    client.post(act, {"note": ""})
    assert AnomalyOrder.objects.get(pk=anomaly.pk).status == AnomalyOrder.Status.OPEN, "a note is required"
    assert client.post(act, {"note": "ledger row restored by hand"}).status_code == 302
    anomaly.refresh_from_db()
    assert anomaly.status == AnomalyOrder.Status.RESOLVED and anomaly.resolved_by == reviewer
    assert anomaly.resolution_note == "ledger row restored by hand" and anomaly.resolved_at is not None
    assert anomaly.history[-1]["by"] == reviewer.username and anomaly.history[-1]["action"] == "resolve"
    page = client.get(reverse("admin:orders_anomalyorder_change", args=[anomaly.pk])).content.decode()
    assert "Resolve with note" not in page


def test_staff_recreate_the_order_of_a_released_reservation_and_return_its_stock(settings):
    settings.SECKILL_REPLAY_GRACE = 0
    activity = make_activity(stock=5, pay_timeout=600)
    (shopper,) = make_users(1)
    # A reservation that never became an order and was given back.
    entry = reserve(activity, shopper)
    from stock.reservations import reservation_release

    reservation_release(activity_id=activity.pk, entry=entry, free_participant=True, reason="replay_exhausted")
    anomaly = _anomaly(activity, shopper)
    reviewer, client = staff_member("reviewers")

    act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "recreate"])
    assert client.post(act, {"note": "shopper complained"}).status_code == 302
    order = Order.objects.get(activity=activity, user=shopper)
    assert order.status == Order.Status.PENDING and redis_remaining(activity.pk) == 4
    assert SeckillStock.objects.get(activity=activity).available == 4
    anomaly.refresh_from_db()
    assert anomaly.order == order and anomaly.history[-1]["action"] == "recreate_order"
    assert anomaly.history[-1]["by"] == reviewer.username and anomaly.history[-1]["at"]
    # Twice: the shopper holds an order now, nothing more is taken.
    client.post(act, {"note": "again"})
    assert Order.objects.filter(activity=activity, user=shopper).count() == 1

    act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "return"])
    assert client.post(act, {"note": "refund"}).status_code == 302
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED and order.cancel_reason == "staff"
    assert redis_remaining(activity.pk) == 5 and SeckillStock.objects.get(activity=activity).available == 5
    assert not stock_redis().hexists(ActivityKeys(activity.pk).users, shopper.pk)
    client.post(act, {"note": "again"})
    assert redis_remaining(activity.pk) == 5, "the stock returns once"
    anomaly.refresh_from_db()
    assert [h["action"] for h in anomaly.history] == ["recreate_order", "return_stock"]
    assert reconcile(activity_id=activity.pk)["identity_ok"]


def test_the_report_page_shows_the_numbers_beside_the_charts():
    activity = make_activity(stock=10, pay_timeout=600)
    orders = buy(activity, make_users(4))
    pay_through_provider(orders[0])
    reconcile(activity_id=activity.pk)  # quiet: the summary only
    reconcile(activity_id=activity.pk, final=True)  # the final check stores a report
    _, client = staff_member("reviewers")
    response = client.get(reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count('src="data:image/svg+xml') == 3
    assert "Units over time" in page and "Units not accounted for" in page
    assert "units paid" in page and "units left, as the live counter counts them (last check)" in page
    figures = response.context["figures"]  # in the merchant's words (orders.admin.FIGURE_WORDS)
    assert figures["units paid"] == 1
    assert figures["units waiting for payment"] == 3
    assert figures["units left, as the live counter counts them (last check)"] == 6
    listing = client.get(reverse("admin:orders_reconciliationreport_changelist")).content.decode()
    assert reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]) in listing
    report = activity.reconciliation_reports.first()
    detail = client.get(reverse("admin:orders_reconciliationreport_change", args=[report.pk]))
    assert detail.status_code == 200 and "records: total = available + pending + paid" in detail.content.decode()
    assert client.post(reverse("admin:orders_reconciliationreport_change", args=[report.pk]), {}).status_code == 403


def test_sharded_anomalies_name_their_shard_and_staff_return_the_units_there(settings):
    """Log ids are unique per shard only: two shards' reservations with the same id are
    two faults, and each one's units go back to its own shard."""
    from orders.selectors import anomaly_evidence
    from orders.services.anomalies import anomaly_open
    from orders.services.anomaly_actions import anomaly_stock_return
    from stock.layout import StockLayout
    from stock.scripts import LogEntry, ScriptCode

    activity = make_activity(stock=6, shards=2)
    client, keys = stock_redis(), ActivityKeys(activity.pk)
    # Both shard logs continue from the same last id, as two streams do whenever they
    # are written in the same millisecond: their next entries get the same id.
    later_ms = int(time.time() * 1000) + 3_600_000
    same = f"{later_ms}-1"
    for shard_keys in keys.shards(2):
        client.xadd(shard_keys.log, {"u": 0, "q": 0, "s": 0}, id=f"{later_ms}-0")
        client.xtrim(shard_keys.log, maxlen=0)
    entries = {}
    for user in make_users(6):
        reply = StockLayout(activity.pk, 2).reserve(client, user_id=user.pk, quantity=1, limit=1)
        assert reply.code == ScriptCode.RESERVED
        if reply.reservation_id == same:
            entries[reply.shard] = LogEntry(reply.reservation_id, user.pk, 1, reply.shard)
        if len(entries) == 2:
            break
    assert sorted(entries) == [0, 1], "both shards' first reservations"
    stocks_before = [int(client.get(k.stock)) for k in keys.shards(2)]

    # The worker gave up on both (the replay opens the anomaly, then releases: a crash
    # in between leaves the reservation in the log for staff).
    anomalies = [
        anomaly_open(
            kind=AnomalyOrder.Kind.REPLAY_EXHAUSTED, activity_id=activity.pk, entry=entry, details={"quantity": 1}
        )
        for entry in entries.values()
    ]
    assert AnomalyOrder.objects.filter(activity=activity).count() == 2, "one shard's fault hid the other's"
    assert sorted(a.shard for a in anomalies) == [0, 1]
    for anomaly in anomalies:
        evidence = anomaly_evidence(anomaly=anomaly)["redis"]
        assert evidence["shard"] == anomaly.shard and evidence["reservation still in the log"]

    reviewer, _ = staff_member("reviewers")
    for anomaly in anomalies:
        stocks = [int(client.get(k.stock)) for k in keys.shards(2)]
        assert "released" in anomaly_stock_return(anomaly=anomaly, by=reviewer, note="gave up")
        after = [int(client.get(k.stock)) for k in keys.shards(2)]
        assert after[anomaly.shard] == stocks[anomaly.shard] + 1, "the unit went back to its own shard"
        assert after[1 - anomaly.shard] == stocks[1 - anomaly.shard]
    assert [int(client.get(k.stock)) for k in keys.shards(2)] == [s + 1 for s in stocks_before]
    assert not any(client.xrange(k.log, min=same, max=same) for k in keys.shards(2))
