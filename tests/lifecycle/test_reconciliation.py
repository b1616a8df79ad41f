"""Reconciliation with injected faults: each lands in its bucket, what can be fixed is
fixed, the rest becomes an anomaly, and a second run right after changes nothing."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from prometheus_client import REGISTRY

from inventory.models import SeckillStock, StockMovement
from orders.charts import report_in_words
from orders.models import AnomalyOrder, Order, ReconciliationReport, ReconciliationSummary
from orders.services.creation import _insert_orders
from orders.services.lifecycle import order_cancel, order_pay
from seckill.models import Activity
from seckill.sale.lifecycle import activity_close, activity_stop_selling
from seckill.sale.reconciliation import REPORT_CONTRACT_KEYS, reconcile
from seckill.sale.selectors import redis_remaining
from seckill.tasks import reconcile_live_task
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_acknowledge

from ..factories import make_activity, make_users
from ..helpers import wait_until
from .helpers import buy, reports, reserve, state

pytestmark = pytest.mark.django_db(transaction=True)


def _inject_faults(activity, users):
    """Every fault of the brief plus the two everyday buckets; returns who is who."""
    paid, overdue, unreturned, healthy = buy(activity, users[:4])
    keys, client = ActivityKeys(activity.pk), stock_redis()

    # A reservation with no order (the enqueue was lost and no replay ran yet).
    lost = reserve(activity, users[4])
    # An order with no database deduction (the consumer's deduction never happened).
    undeducted_entry = reserve(activity, users[5])
    with transaction.atomic():
        (inserted,) = _insert_orders(activity_id=activity.pk, entries=[undeducted_entry])
    undeducted = Order.objects.get(pk=inserted.pk)
    reservations_acknowledge(activity_id=activity.pk, reservation_ids=[undeducted_entry.reservation_id])
    # Redis stock off by three.
    client.incrby(keys.stock, 3)
    # A paid order whose ledger entry is missing.
    order_pay(order=paid)
    StockMovement.objects.filter(order=paid, kind=StockMovement.Kind.DEDUCT).delete()
    # A pending order past its deadline whose task never ran.
    Order.objects.filter(pk=overdue.pk).update(pay_deadline=overdue.created_at)
    # A cancelled order whose Redis return never happened (Redis was away then).
    order_cancel(order=unreturned, reason="shopper")
    client.srem(keys.returned, unreturned.order_no)
    client.decrby(keys.stock, unreturned.quantity)
    return {
        "paid": paid,
        "overdue": overdue,
        "unreturned": unreturned,
        "healthy": healthy,
        "lost": lost,
        "undeducted": undeducted,
    }


def _sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_injected_faults_land_in_their_buckets_and_a_second_run_changes_nothing(settings, caplog):
    settings.SECKILL_REPLAY_GRACE = 0
    drift_anomalies = _sample("seckill_anomalies_opened_total", kind="drift")
    activity = make_activity(stock=20, pay_timeout=600)
    faults = _inject_faults(activity, make_users(6))

    before = state(activity)
    dry = reconcile(activity_id=activity.pk, dry_run=True)
    assert state(activity) == before and reports(activity) == 0, "a dry run changes and stores nothing"
    assert dry["buckets"] == {
        "reserved_not_ordered": 1,
        "pending_past_deadline": 1,
        "cancelled_not_returned": 1,
        "not_deducted": 2,
        "paid_not_deducted": 1,
        "unexplained_drift": 1,
    }, dry
    assert dry["unexplained_drift"] == {"redis": -3, "db": 0, "reserve": 0}
    assert dry["found"]["cancelled_not_returned"] == [faults["unreturned"].order_no]
    assert sorted(dry["found"]["not_deducted"]) == sorted([faults["paid"].order_no, faults["undeducted"].order_no])
    assert dry["anomalies_opened"] == 0 and not dry["identity_ok"]

    first = reconcile(activity_id=activity.pk)
    assert first["buckets"] == dry["buckets"]
    assert first["actions"] == {
        "orders_created": 1,  # the lost reservation
        "reservations_released": 0,
        "orders_cancelled": 1,  # the overdue order
        "orders_returned_to_redis": 1,  # the cancelled order's units
        "orders_deducted": 1,  # the order without deduction
        "pending_claims_settled": 0,  # sharded stock only
        "reserve_units_released": 0,  # no database reserve here
    }, first
    assert first["anomalies_opened"] == 2, first
    # The metric and the log lines an alert fires on.
    assert _sample("seckill_anomalies_opened_total", kind="drift") == drift_anomalies + 1
    gauge = "seckill_reconcile_unexplained_drift_units"
    assert _sample(gauge, activity=str(activity.pk), side="redis") == -3
    assert f"seckill.reconcile.drift activity={activity.pk} " in caplog.text
    assert f"seckill.anomaly kind=drift activity={activity.pk} " in caplog.text
    anomalies = {(a.kind, a.fault_key): a for a in AnomalyOrder.objects.filter(activity=activity)}
    assert set(anomalies) == {
        (AnomalyOrder.Kind.PAID_NOT_DEDUCTED, f"order:{faults['paid'].pk}"),
        (AnomalyOrder.Kind.DRIFT, "redis:-3"),
    }
    assert anomalies[(AnomalyOrder.Kind.PAID_NOT_DEDUCTED, f"order:{faults['paid'].pk}")].order == faults["paid"]
    # Fixed: the database identity holds again; the Redis drift of -3 stays for staff.
    assert first["db_drift"] == 0 and first["redis_drift"] == -3 and not first["identity_ok"]
    assert Order.objects.get(activity=activity, reservation_id=faults["lost"].reservation_id).status == "pending"
    assert Order.objects.get(pk=faults["overdue"].pk).status == Order.Status.CANCELLED
    assert StockMovement.objects.filter(order=faults["undeducted"], kind=StockMovement.Kind.DEDUCT).count() == 1
    assert stock_redis().sismember(ActivityKeys(activity.pk).returned, faults["unreturned"].order_no)
    stored = ReconciliationReport.objects.get(activity=activity)
    assert stored.report["anomalies_opened"] == 2 and stored.anomalies_opened == 2 and not stored.identity_ok

    after_first = state(activity)
    second = reconcile(activity_id=activity.pk)
    assert state(activity) == after_first, "the second run changed something"
    assert second["anomalies_opened"] == 0 and not any(second["actions"].values()), second
    assert second["buckets"] == {
        "reserved_not_ordered": 0,
        "pending_past_deadline": 0,
        "cancelled_not_returned": 0,
        "not_deducted": 1,  # the paid order still has no ledger row: an open anomaly
        "paid_not_deducted": 1,
        "unexplained_drift": 1,  # the Redis drift of -3: an open anomaly
    }
    assert reports(activity) == 2

    # Staff correct Redis (a forced re-warm derives it from the database): the identity holds.
    from seckill.sale.lifecycle import activity_warmup

    activity_warmup(activity_id=activity.pk, force=True)
    third = reconcile(activity_id=activity.pk)
    assert third["redis_drift"] == 0 and third["identity_ok"], third
    assert third["anomalies_opened"] == 0


def test_a_reservation_that_cannot_become_an_order_is_returned_after_the_attempt_limit(settings):
    settings.SECKILL_REPLAY_GRACE = 0
    settings.SECKILL_REPLAY_MAX_ATTEMPTS = 2
    activity = make_activity(stock=5)
    (user,) = make_users(1)
    keys, client = ActivityKeys(activity.pk), stock_redis()
    # A poison entry: quantity 0 breaks the order's check constraint every time.
    poison = client.xadd(keys.log, {"u": user.pk, "q": 0, "s": 0}).decode()
    client.hset(keys.users, user.pk, poison)

    first = reconcile(activity_id=activity.pk)
    assert first["buckets"]["reserved_not_ordered"] == 1 and first["anomalies_opened"] == 0
    second = reconcile(activity_id=activity.pk)
    assert second["actions"]["reservations_released"] == 1 and second["anomalies_opened"] == 1
    anomaly = AnomalyOrder.objects.get(activity=activity)
    assert anomaly.kind == AnomalyOrder.Kind.REPLAY_EXHAUSTED and anomaly.reservation_id == poison
    assert client.xlen(keys.log) == 0 and not client.hexists(keys.users, user.pk)
    third = reconcile(activity_id=activity.pk)
    assert third["anomalies_opened"] == 0 and third["identity_ok"] and not any(third["buckets"].values())


def test_close_runs_the_final_reconciliation_then_removes_every_key(settings):
    activity = make_activity(stock=10, pay_timeout=600)
    pending, paid = buy(activity, make_users(2))
    order_pay(order=paid)
    keys, client = ActivityKeys(activity.pk), stock_redis()
    # A large participants hash and a stray key with the activity's tag.
    for start in range(0, 20_000, 5000):
        client.hset(keys.users, mapping={f"ghost{i}": "0-1" for i in range(start, start + 5000)})
    client.set(f"seckill:{keys.tag}:other", 1)
    other = make_activity(stock=3)
    activity_stop_selling(activity_id=activity.pk)
    settled = Activity.objects.get(pk=activity.pk).end_at + timedelta(seconds=settings.SECKILL_ACTIVITY_CACHE_TTL + 1)
    wait_until(lambda: timezone.now() > settled, timeout=30, what="web processes to stop selling")

    result = activity_close(activity_id=activity.pk)
    assert result["reconciliation"]["final"] and result["reconciliation"]["identity_ok"]
    assert ReconciliationReport.objects.filter(activity=activity, final=True).count() == 1
    final = ReconciliationReport.objects.get(activity=activity, final=True)
    assert ReconciliationSummary.objects.get(activity=activity).last_report == final
    assert client.keys(f"*{keys.tag}*") == []
    assert Activity.objects.get(pk=activity.pk).status == Activity.Status.ENDED
    assert redis_remaining(other.pk) == 3, "another activity's keys are untouched"

    # Cancelled after the end: the database takes the units back; Redis stays clean.
    order_cancel(order=pending, reason="shopper")
    assert SeckillStock.objects.get(activity=activity).available == 9
    assert client.keys(f"*{keys.tag}*") == []
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["redis_remaining"] is None


def test_reconcile_command_reports_acts_and_dry_runs(settings):
    settings.SECKILL_REPLAY_GRACE = 0
    activity = make_activity(stock=5)
    (user,) = make_users(1)
    reserve(activity, user)

    out = StringIO()
    call_command("reconcile", str(activity.pk), "--json", "--dry-run", stdout=out)
    report = json.loads(out.getvalue())
    assert REPORT_CONTRACT_KEYS <= set(report), REPORT_CONTRACT_KEYS - set(report)
    assert report["buckets"]["reserved_not_ordered"] == 1 and report["identity_ok"]
    assert not Order.objects.filter(activity=activity).exists() and reports(activity) == 0

    out = StringIO()
    call_command("reconcile", str(activity.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["actions"]["orders_created"] == 1
    assert Order.objects.filter(activity=activity, user=user).exists() and reports(activity) == 1
    out = StringIO()
    call_command("reconcile", stdout=out)
    assert "OK" in out.getvalue()


def test_the_beat_task_reconciles_live_activities_only():
    live = make_activity(stock=5)
    make_activity(stock=5, started=False)  # not live yet: not reconciled
    assert reconcile_live_task() == {live.pk: True}
    # Nothing to find on a quiet sale: the summary says it was checked, no report row.
    assert not ReconciliationReport.objects.exists()
    assert ReconciliationSummary.objects.get().activity_id == live.pk


def test_quiet_runs_store_no_report_but_keep_the_summary_up_to_date(settings):
    settings.SECKILL_REPLAY_GRACE = 0
    activity = make_activity(stock=5)
    for _ in range(3):
        assert reconcile(activity_id=activity.pk)["identity_ok"]
    assert reports(activity) == 0
    summary = ReconciliationSummary.objects.get(activity=activity)
    assert (summary.runs, summary.quiet_runs_since_report, summary.last_identity_ok) == (3, 3, True)
    assert summary.last_report is None
    checked = summary.last_checked_at

    # A reservation without an order: the run creates it and stores a report.
    (user,) = make_users(1)
    reserve(activity, user)
    repaired = reconcile(activity_id=activity.pk)
    assert repaired["actions"]["orders_created"] == 1
    stored = ReconciliationReport.objects.get(activity=activity)
    assert stored.actions_taken == 1 and stored.report == json.loads(json.dumps(repaired))
    summary.refresh_from_db()
    assert summary.last_report == stored and summary.quiet_runs_since_report == 0 and summary.runs == 4
    assert summary.last_checked_at > checked

    # Quiet again: still one report, the summary counts the quiet run.
    reconcile(activity_id=activity.pk)
    assert reports(activity) == 1
    summary.refresh_from_db()
    assert (summary.runs, summary.quiet_runs_since_report) == (5, 1)
    # A dry run stores and counts nothing.
    reconcile(activity_id=activity.pk, dry_run=True)
    summary.refresh_from_db()
    assert reports(activity) == 1 and summary.runs == 5


def test_a_run_on_a_moving_sale_raises_no_alarm_and_keeps_the_last_verdict(caplog):
    """A busy sale keeps Redis moving while reconciliation reads it: the picture it ends
    with is not consistent (``consistent: false``) and its drift is not a finding. Such a
    run must not fire the drift alert (the log line, the gauge, the ``drift`` count), store
    a report of problems nobody had, nor replace the verdict staff see with its own."""
    import threading

    from django.db import connection

    activity = make_activity(stock=5000, pay_timeout=600)
    users = make_users(3000, prefix="moving")
    quiet = reconcile(activity_id=activity.pk)
    assert quiet["consistent"] and quiet["identity_ok"], quiet
    drift_gauge = {"activity": str(activity.pk), "side": "redis"}
    stop, bought = threading.Event(), []

    def shoppers(mine) -> None:  # reservations turned into orders, one after another
        try:
            for user in mine:
                if stop.is_set():
                    return
                buy(activity, [user])
                bought.append(user.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=shoppers, args=(users[i::2],)) for i in range(2)]
    for t in threads:
        t.start()
    moving = None
    try:
        wait_until(lambda: len(bought) >= 20, timeout=60, what="the sale moving")
        deadline = timezone.now() + timedelta(seconds=90)
        while moving is None and timezone.now() < deadline and any(t.is_alive() for t in threads):
            caplog.clear()
            runs_moving = _sample("seckill_reconcile_runs_total", outcome="moving")
            runs_drift = _sample("seckill_reconcile_runs_total", outcome="drift")
            gauge = _sample("seckill_reconcile_unexplained_drift_units", **drift_gauge)
            report = reconcile(activity_id=activity.pk)
            if not report["consistent"] and not report["identity_ok"]:
                moving = (report, runs_moving, runs_drift, gauge, [r.getMessage() for r in caplog.records])
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert moving is not None, "no run saw the sale move with its drift off"
    report, runs_moving, runs_drift, gauge, logged = moving
    assert not [line for line in logged if "seckill.reconcile.drift" in line], logged
    assert _sample("seckill_reconcile_runs_total", outcome="moving") >= runs_moving + 1
    assert _sample("seckill_reconcile_runs_total", outcome="drift") == runs_drift
    assert gauge == 0 and _sample("seckill_reconcile_unexplained_drift_units", **drift_gauge) == 0
    summary = ReconciliationSummary.objects.get(activity=activity)
    assert summary.last_identity_ok and summary.latest["consistent"], summary.latest
    assert not ReconciliationReport.objects.filter(activity=activity, identity_ok=False).exists()
    assert report_in_words(report).startswith("Not measured: the sale kept moving"), report_in_words(report)

    settled = reconcile(activity_id=activity.pk)  # the sale quiet again
    assert settled["consistent"] and settled["identity_ok"], settled
