"""The order consumer: reservation → order, exactly once, whatever the delivery does.

Real PostgreSQL and Redis throughout; real Celery workers where delivery matters (a
message delivered twice, a worker killed mid-batch), a real gunicorn with a dead broker
for the lost enqueue.
"""

import json
import random
import re
import threading
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, F, Sum

from inventory.models import SeckillStock, StockMovement
from orders.models import AnomalyOrder, Order
from orders.services.creation import order_number, orders_create_from_reservations
from orders.services.lifecycle import order_cancel
from orders.tasks import order_create_task
from seckill.models import Activity
from seckill.purchase.reserve import purchase_reserve
from seckill.purchase.result import purchase_result
from seckill.sale.activities import activity_token_ensure
from seckill.sale.reconciliation import reconcile
from seckill.sale.replay import reservations_replay
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_snapshot
from seckill.tasks import reservations_drain_task, reservations_replay_task
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending
from stock.scripts import LogEntry, ScriptCode, run_purchase

from ..factories import make_activity, make_users, token_of
from ..helpers import (
    free_port,
    purchase,
    start_celery_worker,
    start_gunicorn,
    subprocess_env,
    wait_until,
    waiting_on_a_lock,
)

pytestmark = pytest.mark.django_db(transaction=True)


def reserve(activity, user, quantity: int = 1) -> LogEntry:
    """The purchase script alone: a reservation in the log and no task sent (what a
    web process that died right after the script, or a failed enqueue, leaves)."""
    reply = run_purchase(
        stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=quantity, limit=activity.per_user_limit
    )
    assert reply.code == ScriptCode.RESERVED, reply
    return LogEntry(reply.reservation_id, user.pk, quantity, 0)


def task_args(activity, entry: LogEntry) -> list:
    return [activity.pk, entry.reservation_id, entry.user_id, entry.quantity, entry.shard]


def assert_exactly_once(activity, entries: list[LogEntry]) -> None:
    """One order and one ledger deduction per reservation; both identities hold."""
    orders = Order.objects.filter(activity=activity)
    # A log id is unique within its shard's log only (S > 1).
    per_reservation = orders.values_list("shard", "reservation_id").annotate(n=Count("id"))
    by_reservation = {(shard, rid): n for shard, rid, n in per_reservation}
    assert by_reservation == {(e.shard, e.reservation_id): 1 for e in entries}
    assert not orders.values("user").annotate(n=Count("id")).filter(n__gt=1).exists()
    units = sum(e.quantity for e in entries)
    deducts = StockMovement.objects.filter(activity=activity, kind="deduct")
    assert deducts.count() == len(entries)
    assert deducts.values("order").distinct().count() == len(entries)
    assert deducts.aggregate(u=Sum("quantity"))["u"] == units
    stock = SeckillStock.objects.get(activity=activity)
    assert stock.available == stock.total - units
    assert not any(stock_redis().xlen(k.log) for k in ActivityKeys(activity.pk).shards(activity.shards))
    assert not AnomalyOrder.objects.filter(activity=activity).exists()
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
    assert report["reserved_not_ordered"] == 0


def order_count(activity) -> int:
    return Order.objects.filter(activity=activity).count()


# --- delivered twice ---------------------------------------------------------------


def test_task_delivered_twice_in_a_row_creates_one_order():
    activity = make_activity(stock=5)
    (user,) = make_users(1)
    entry = reserve(activity, user)
    order_create_task.apply(args=task_args(activity, entry)).get()
    order_create_task.apply(args=task_args(activity, entry)).get()
    assert_exactly_once(activity, [entry])
    assert redis_remaining(activity.pk) == 4


def test_task_delivered_many_times_concurrently_creates_one_order_each():
    activity = make_activity(stock=20, per_user_limit=2)
    users = make_users(20)
    rng = random.Random(7)
    entries = [reserve(activity, u, rng.randint(1, 2)) for u in users[:12]]
    deliveries = [e for e in entries for _ in range(4)]
    rng.shuffle(deliveries)
    chunks = [deliveries[i::8] for i in range(8)]
    barrier = threading.Barrier(len(chunks))
    errors = []

    def deliver(chunk):
        try:
            barrier.wait(timeout=60)
            for entry in chunk:
                order_create_task.apply(args=task_args(activity, entry), throw=True)
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver, args=(chunk,)) for chunk in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert_exactly_once(activity, entries)


@pytest.mark.slow
def test_two_real_messages_for_each_reservation_make_one_order(celery_worker):
    activity = make_activity(stock=30)
    users = make_users(30)
    entries = [reserve(activity, u) for u in users]
    for entry in entries:
        order_create_task.apply_async(args=task_args(activity, entry))
        order_create_task.apply_async(args=task_args(activity, entry))
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)

    def consumer_messages_unacked() -> int:
        # The orders' payment-deadline tasks (eta = the deadline) wait unacknowledged in
        # the worker by design; only the order-creation messages must all be consumed.
        messages = [json.loads(raw)[0] for raw in broker.hvals("unacked")]
        return sum(m["headers"]["task"] == "orders.tasks.order_create_task" for m in messages)

    wait_until(
        lambda: order_count(activity) == 30 and broker.llen("celery") == 0 and consumer_messages_unacked() == 0,
        timeout=120,
        what="the worker to consume every message",
    )
    assert_exactly_once(activity, entries)
    assert redis_remaining(activity.pk) == 0


# --- the drain task (what production sends: one per burst) delivered twice ---------------


def reserve_many(activity, users, rng: random.Random) -> list[LogEntry]:
    """Reservations through the purchase service (every shard's script when S > 1), as
    the web process makes them; the log is read back for the entries."""
    snapshot = activity_snapshot(activity.pk)
    for user in users:
        purchase_reserve(activity=snapshot, user_id=user.pk, quantity=rng.randint(1, activity.per_user_limit))
    return reservations_pending(activity_id=activity.pk, count=len(users) + 1)


def assert_drained(activity, entries: list[LogEntry]) -> None:
    assert_exactly_once(activity, entries)
    flags = [k.drain for k in ActivityKeys(activity.pk).shards(activity.shards)]
    assert not stock_redis().exists(*flags), "the drain flag was left set"
    assert redis_remaining(activity.pk) == activity.total_stock - sum(e.quantity for e in entries)


def test_drain_task_delivered_twice_in_a_row_creates_one_order_each():
    activity = make_activity(stock=40, per_user_limit=2)
    entries = reserve_many(activity, make_users(15), random.Random(3))
    first = reservations_drain_task.apply(args=[activity.pk], throw=True).get()
    second = reservations_drain_task.apply(args=[activity.pk], throw=True).get()
    assert first["created"] == len(entries) and second["created"] == 0
    assert_drained(activity, entries)


@pytest.mark.parametrize("shards", [1, 4])
def test_drain_task_delivered_twice_concurrently_creates_one_order_each(settings, shards):
    # Small batches: the two deliveries interleave over many transactions on the same log.
    settings.SECKILL_ORDER_BATCH_SIZE = 3
    activity = make_activity(stock=300, per_user_limit=2, shards=shards)
    entries = reserve_many(activity, make_users(120), random.Random(11))
    assert len(entries) == 120
    barrier = threading.Barrier(2)
    outcomes, errors = [], []

    def deliver():
        try:
            barrier.wait(timeout=60)
            outcomes.append(reservations_drain_task.apply(args=[activity.pk], throw=True).get())
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    assert len(outcomes) == 2
    # Between them the two deliveries made each order once (whichever got there first).
    assert sum(o["created"] for o in outcomes) == len(entries), outcomes
    assert sum(o["released"] for o in outcomes) == 0, outcomes
    assert_drained(activity, entries)


@pytest.mark.slow
def test_drain_task_delivered_twice_to_two_real_workers_at_once(process_logs):
    activity = make_activity(stock=200)
    entries = [reserve(activity, user) for user in make_users(200)]  # no message sent yet
    # One task at a time per worker and no prefetching: the second message cannot wait
    # behind the first in one worker, it goes to the other.
    options = ("--prefetch-multiplier", "1")
    workers = [
        start_celery_worker(process_logs, name=name, concurrency=1, options=options) for name in ("drain-a", "drain-b")
    ]
    db = connection.settings_dict
    dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname={db['NAME']}"
    try:
        with psycopg.connect(dsn) as blocker:
            # Hold the stock row: the first delivery stops inside its first order
            # transaction; the second, reading the same log entries, waits on the first's
            # uncommitted orders. Both are then mid-drain when the row is let go.
            blocker.execute("SELECT 1 FROM inventory_seckillstock WHERE activity_id = %s FOR UPDATE", [activity.pk])
            reservations_drain_task.apply_async(args=[activity.pk])
            wait_until(lambda: waiting_on_a_lock() >= 1, timeout=120, what="the first delivery to block")
            reservations_drain_task.apply_async(args=[activity.pk])
            wait_until(lambda: waiting_on_a_lock() >= 2, timeout=120, what="the second delivery to block")
            blocker.rollback()
        wait_until(
            lambda: all(re.search(r"reservations_drain_task\[[^]]+\] succeeded", w.log()) for w in workers),
            timeout=120,
            what="both workers to finish their delivery",
        )
    finally:
        for worker in workers:
            worker.stop()
    assert_drained(activity, entries)


# --- the database guard and the constraint say no -------------------------------------------


def test_db_guard_failure_frees_the_shopper_keeps_the_units_off_sale_and_opens_an_anomaly():
    activity = make_activity(stock=3)
    users = make_users(3)
    # Redis believes in 3 units, the database has 1: they disagree.
    SeckillStock.objects.filter(activity=activity).update(available=1)
    entries = [reserve(activity, u) for u in users]
    assert redis_remaining(activity.pk) == 0
    for entry in entries:
        order_create_task.apply(args=task_args(activity, entry), throw=True)

    assert order_count(activity) == 1
    assert SeckillStock.objects.get(activity=activity).available == 0
    # The database has no units for the two refused reservations: they are not sold again,
    # they leave what Redis counts as loaded (so its identity still holds).
    assert redis_remaining(activity.pk) == 0
    assert int(stock_redis().get(ActivityKeys(activity.pk).loaded)) == 1
    assert stock_redis().xlen(ActivityKeys(activity.pk).log) == 0
    anomalies = AnomalyOrder.objects.filter(activity=activity, kind=AnomalyOrder.Kind.DB_GUARD_FAILED)
    refused = [e for e in entries if not Order.objects.filter(reservation_id=e.reservation_id).exists()]
    assert sorted(anomalies.values_list("reservation_id", flat=True)) == sorted(e.reservation_id for e in refused)
    # A redelivery does not open the anomaly twice or return the units twice.
    order_create_task.apply(args=task_args(activity, refused[0]), throw=True)
    assert anomalies.count() == 2 and redis_remaining(activity.pk) == 0
    assert int(stock_redis().get(ActivityKeys(activity.pk).loaded)) == 1

    # The refused shopper learns it and is free to try again.
    loser = get_user_model().objects.get(pk=refused[0].user_id)
    assert purchase_result(activity_id=activity.pk, user_id=loser.pk) == ("failed", "no_stock")
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(loser)}")
    token = activity_token_ensure(activity_id=activity.pk)
    response = client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json")
    assert response.json()["code"] == "sold_out", response.content  # free to try, nothing left to buy


def test_duplicate_reservation_of_a_shopper_with_a_live_order_is_released():
    activity = make_activity(stock=5)
    (user,) = make_users(1)
    first = reserve(activity, user)
    orders_create_from_reservations(activity_id=activity.pk, entries=[first])
    # Participants lost (say a Redis restart without the re-warm restoring them):
    # the script lets the same shopper reserve again.
    stock_redis().hdel(ActivityKeys(activity.pk).users, user.pk)
    second = reserve(activity, user)
    assert redis_remaining(activity.pk) == 3
    outcome = orders_create_from_reservations(activity_id=activity.pk, entries=[second])

    assert outcome.released == [second.reservation_id]
    assert list(Order.objects.filter(activity=activity).values_list("reservation_id", flat=True)) == [
        first.reservation_id
    ]
    assert redis_remaining(activity.pk) == 4
    assert SeckillStock.objects.get(activity=activity).available == 4
    anomaly = AnomalyOrder.objects.get(activity=activity)
    assert (anomaly.kind, anomaly.reservation_id, anomaly.user_id) == (
        AnomalyOrder.Kind.DUPLICATE_RESERVATION,
        second.reservation_id,
        user.pk,
    )
    # The shopper who holds an order is still a participant: no third reservation.
    reply = run_purchase(stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=1, limit=1)
    assert reply.code == ScriptCode.DUPLICATE
    assert reconcile(activity_id=activity.pk)["identity_ok"]
    # The participant record points at the live order again: cancelling it frees the shopper.
    assert stock_redis().hget(ActivityKeys(activity.pk).users, user.pk).decode() == first.reservation_id
    order_cancel(order=Order.objects.get(activity=activity, user=user), reason="shopper")
    assert redis_remaining(activity.pk) == 5
    again = run_purchase(stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=1, limit=1)
    assert again.code == ScriptCode.RESERVED


def test_a_batch_the_database_cannot_fully_honour_writes_nothing_then_goes_one_by_one():
    """One batch with a reservation ordered before, mixed quantities, and two units fewer
    in the database than Redis sold: the batch's statements write nothing, then each
    reservation alone gets its order and its ledger row, or is refused (its units, which the
    database does not have, leave Redis's count)."""
    activity = make_activity(stock=10, per_user_limit=3, seckill_price=Decimal("2.50"), pay_timeout=600)
    users = make_users(5)
    entries = [reserve(activity, u, quantity=q) for u, q in zip(users, [1, 3, 2, 1, 3], strict=True)]
    orders_create_from_reservations(activity_id=activity.pk, entries=entries[:1])
    SeckillStock.objects.filter(activity=activity).update(available=F("available") - 2)  # 7 left, 9 asked
    version = SeckillStock.objects.get(activity=activity).version

    outcome = orders_create_from_reservations(activity_id=activity.pk, entries=list(reversed(entries)))

    ids = [e.reservation_id for e in entries]
    assert (outcome.created, outcome.already_done, outcome.released) == (ids[1:4], ids[:1], ids[4:])
    orders = {o.reservation_id: o for o in Order.objects.filter(activity=activity)}
    assert sorted(orders) == sorted(ids[:4])
    for entry in entries[:4]:
        order = orders[entry.reservation_id]
        assert order.order_no == order_number(activity_id=activity.pk, entry=entry)
        assert (order.user_id, order.quantity, order.shard) == (entry.user_id, entry.quantity, 0)
        assert order.status == Order.Status.PENDING
        assert order.amount == Decimal("2.50") * entry.quantity
        assert order.pay_deadline == order.created_at + timedelta(seconds=600)
    deducts = StockMovement.objects.filter(activity=activity, kind=StockMovement.Kind.DEDUCT)
    assert {(m.order_id, m.quantity, m.reason) for m in deducts} == {
        (o.pk, o.quantity, "order_created") for o in orders.values()
    }
    stock = SeckillStock.objects.get(activity=activity)
    # The failed batch moved nothing; the three orders made one by one moved 6 units.
    assert (stock.available, stock.version) == (1, version + 3)
    assert redis_remaining(activity.pk) == 0  # the refused reservation's 3 units are not on sale again
    assert int(stock_redis().get(ActivityKeys(activity.pk).loaded)) == 10 - 3
    assert stock_redis().xlen(ActivityKeys(activity.pk).log) == 0
    anomaly = AnomalyOrder.objects.get(activity=activity)
    assert (anomaly.kind, anomaly.reservation_id) == (AnomalyOrder.Kind.DB_GUARD_FAILED, ids[4])


def test_reservations_of_a_missing_activity_are_neither_ordered_nor_released():
    """The price and the deadline come from the activity's row inside the INSERT; with no
    row, nothing is inserted, and that is an error, not a duplicate to release."""
    activity = make_activity(stock=2)
    (user,) = make_users(1)
    entry = reserve(activity, user)
    missing = Activity.objects.order_by("-pk").values_list("pk", flat=True).first() + 1

    with pytest.raises(Activity.DoesNotExist):
        orders_create_from_reservations(activity_id=missing, entries=[entry])

    assert not Order.objects.exists() and not AnomalyOrder.objects.exists()
    assert redis_remaining(activity.pk) == 1  # the reservation still holds its unit
    assert stock_redis().xlen(ActivityKeys(activity.pk).log) == 1


# --- lost enqueue, killed worker, poison ---------------------------------------------------


@pytest.mark.slow
def test_lost_enqueue_is_repaired_by_the_replay_after_the_grace(process_logs, settings):
    activity = make_activity(stock=5)
    users = make_users(3)
    token = activity_token_ensure(activity_id=activity.pk)
    # A web server whose broker is gone: every enqueue fails, the purchases still succeed.
    dead_broker = f"redis://127.0.0.1:{free_port()}/0"
    server, base = start_gunicorn(process_logs, workers=1, threads=4, env=subprocess_env(CELERY_BROKER_URL=dead_broker))
    try:
        answers = [purchase(base, activity.pk, token_of(u), token)[:2] for u in users]
    finally:
        server.stop()
    assert [status for status, _ in answers] == [202, 202, 202], answers
    assert "drain request for activity" in server.log()  # the publish failed; the log keeps them
    entries = reservations_pending(activity_id=activity.pk)
    assert len(entries) == 3 and order_count(activity) == 0

    # Within the grace nothing is replayed (the task may still be on its way) ...
    assert reservations_replay(activity_id=activity.pk, grace_seconds=3600).created == 0
    assert order_count(activity) == 0
    # ... after it, the beat task creates every order, once.
    settings.SECKILL_REPLAY_GRACE = 0
    assert reservations_replay_task() == {activity.pk: 3}
    assert reservations_replay_task() == {activity.pk: 0}
    assert_exactly_once(activity, entries)
    assert redis_remaining(activity.pk) == 2


@pytest.mark.slow
def test_worker_killed_mid_batch_every_order_exactly_once(process_logs):
    activity = make_activity(stock=40)
    users = make_users(40)
    entries = [reserve(activity, u) for u in users]
    worker = start_celery_worker(process_logs, name="doomed")
    try:
        for entry in entries[:10]:
            order_create_task.apply_async(args=task_args(activity, entry))
        wait_until(lambda: order_count(activity) == 10, timeout=120, what="the first ten orders")

        # Hold the stock row so that the worker is caught inside its order transaction
        # (order inserted, guard waiting), then kill it there: a crash mid-batch.
        db = connection.settings_dict
        dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname={db['NAME']}"
        with psycopg.connect(dsn) as blocker:
            blocker.execute("SELECT 1 FROM inventory_seckillstock WHERE activity_id = %s FOR UPDATE", [activity.pk])
            for entry in entries[10:]:
                order_create_task.apply_async(args=task_args(activity, entry))
            wait_until(lambda: waiting_on_a_lock() >= 1, timeout=120, what="the worker to block on the stock row")
            worker.kill()
            assert not worker.alive()
            blocker.rollback()
    finally:
        worker.stop()
    assert order_count(activity) < 40  # the crash really left work undone

    # A new worker and the replay (sent through the broker, as beat does) finish the job.
    replacement = start_celery_worker(process_logs, name="replacement")
    try:

        def replayed_all() -> bool:
            reservations_replay_task.apply_async()
            return order_count(activity) == 40 and stock_redis().xlen(ActivityKeys(activity.pk).log) == 0

        wait_until(replayed_all, timeout=120, interval=1.0, what="the replay to create every order")
    finally:
        replacement.stop()
    assert_exactly_once(activity, entries)
    assert redis_remaining(activity.pk) == 0


def test_poison_reservation_is_given_up_after_the_attempt_limit(settings):
    settings.SECKILL_REPLAY_MAX_ATTEMPTS = 3
    activity = make_activity(stock=5)
    good_user, doomed_user = make_users(2)
    good = reserve(activity, good_user)
    poison = reserve(activity, doomed_user, 1)
    # The shopper's row disappears before the order is made: the insert violates the
    # foreign key every time it is tried.
    doomed_id = doomed_user.pk
    doomed_user.delete()
    assert redis_remaining(activity.pk) == 3

    first = reservations_replay(activity_id=activity.pk, grace_seconds=0)
    assert (first.created, first.released) == (1, 0)  # the good one is not held back by the poison
    assert reservations_replay(activity_id=activity.pk, grace_seconds=0).released == 0
    assert [e.reservation_id for e in reservations_pending(activity_id=activity.pk)] == [poison.reservation_id]
    third = reservations_replay(activity_id=activity.pk, grace_seconds=0)
    assert third.released == 1

    assert redis_remaining(activity.pk) == 4  # the poison's unit is back on sale
    assert stock_redis().xlen(ActivityKeys(activity.pk).log) == 0
    stock = SeckillStock.objects.get(activity=activity)
    assert stock.available == 4  # the database only ever lost the good order's unit
    anomaly = AnomalyOrder.objects.get(activity=activity)
    assert anomaly.kind == AnomalyOrder.Kind.REPLAY_EXHAUSTED
    assert anomaly.reservation_id == poison.reservation_id
    assert anomaly.details["attempts"] == 3 and anomaly.details["user_id"] == doomed_id
    assert list(Order.objects.filter(activity=activity).values_list("reservation_id", flat=True)) == [
        good.reservation_id
    ]
    # Nothing more happens on later runs.
    assert reservations_replay(activity_id=activity.pk, grace_seconds=0).seen == 0
    assert reconcile(activity_id=activity.pk)["identity_ok"]
