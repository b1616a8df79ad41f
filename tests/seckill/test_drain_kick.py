"""One drain task per burst: purchases publish a message only when no drain task is at
work, and every reservation still gets its order without waiting for the replay."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from celery.signals import before_task_publish
from django.db.models import Sum

from orders.models import Order
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.snapshot import activity_snapshot
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DRAIN_TASK = "seckill.tasks.reservations_drain_task"


@pytest.fixture
def drain_publishes():
    published, lock = [], threading.Lock()

    def count(sender=None, **_):
        if sender == DRAIN_TASK:
            with lock:
                published.append(sender)

    before_task_publish.connect(count, weak=False)
    yield published
    before_task_publish.disconnect(count)


def test_a_burst_publishes_a_handful_of_drain_tasks_and_every_reservation_is_ordered(celery_worker, drain_publishes):
    # The worker runs no beat: only drain tasks can make these orders (no replay).
    shoppers = 600
    activity = make_activity(stock=shoppers)
    users = make_users(shoppers, prefix="kick")
    snapshot = activity_snapshot(activity.pk)

    def buy(user):
        return purchase_reserve(activity=snapshot, user_id=user.pk, quantity=1).reservation_id

    with ThreadPoolExecutor(max_workers=12) as pool:
        reservations = list(pool.map(buy, users))
    assert len(set(reservations)) == shoppers

    wait_until(
        lambda: (Order.objects.filter(activity=activity).aggregate(u=Sum("quantity"))["u"] or 0) == shoppers,
        timeout=120,
        what="every reservation to become an order",
    )
    keys = ActivityKeys(activity.pk)
    wait_until(lambda: not stock_redis().exists(keys.drain), timeout=30, what="the drain flag to be cleared")
    assert stock_redis().xlen(keys.log) == 0
    assert Order.objects.filter(activity=activity).count() == shoppers
    # One task per purchase would be 600; one per burst is a handful (a new one only
    # after a pass found the log empty while purchases were still arriving).
    assert 1 <= len(drain_publishes) <= shoppers // 20, len(drain_publishes)


def test_a_purchase_while_a_drain_task_works_publishes_nothing_and_still_gets_its_order():
    """Deterministic: the drain task is held mid-batch (the stock row is locked), a shopper
    buys meanwhile. The task keeps the flag set while it works, so that purchase asks for
    no task (kick false); the task's next pass or its last read after clearing the flag
    makes the order anyway."""
    import psycopg
    from django.db import connection

    from seckill.tasks import reservations_drain_task
    from stock.scripts import run_purchase

    from ..helpers import waiting_on_a_lock

    activity = make_activity(stock=10)
    first, second = make_users(2, prefix="held")
    keys, client = ActivityKeys(activity.pk), stock_redis()
    assert run_purchase(client, keys, user_id=first.pk, quantity=1, limit=1).kick  # asks for a drain
    db = connection.settings_dict
    dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname={db['NAME']}"
    result = {}

    def drain():
        try:
            result["totals"] = reservations_drain_task(activity.pk)
        finally:
            connection.close()

    with psycopg.connect(dsn) as blocker:
        blocker.execute("SELECT 1 FROM inventory_seckillstock WHERE activity_id = %s FOR UPDATE", [activity.pk])
        task = threading.Thread(target=drain)
        task.start()
        wait_until(lambda: waiting_on_a_lock() >= 1, timeout=60, what="the drain task to be mid-batch")
        during = run_purchase(client, keys, user_id=second.pk, quantity=1, limit=1)
        blocker.rollback()
    task.join(60)
    assert not task.is_alive()
    assert during.code == 1 and not during.kick, "a purchase during a drain must not ask for another"
    assert set(Order.objects.filter(activity=activity).values_list("user_id", flat=True)) == {first.pk, second.pk}
    assert result["totals"]["created"] == 2
    assert client.xlen(keys.log) == 0
    assert not client.exists(keys.drain), "the flag is cleared once the log is empty"


def test_a_trickle_of_purchases_is_ordered_a_batch_at_a_time(transactional_db, process_logs):
    """A steady stream, one purchase after another: the drain task waits
    SECKILL_DRAIN_PASS_PAUSE after a pass that found less than a batch, so the orders are
    written in a few transactions, not one (with a pass's fixed cost) per few purchases.
    Every order of a batch carries the batch's timestamp: distinct timestamps = passes."""
    import math
    import time

    from ..helpers import start_celery_worker, subprocess_env

    pause = 1.0
    worker = start_celery_worker(process_logs, env=subprocess_env(SECKILL_DRAIN_PASS_PAUSE=str(pause)))
    try:
        shoppers = 150
        activity = make_activity(stock=shoppers)
        users = make_users(shoppers, prefix="trickle")
        snapshot = activity_snapshot(activity.pk)
        started = time.monotonic()
        for i, user in enumerate(users):  # a steady stream: one purchase every 10 ms
            purchase_reserve(activity=snapshot, user_id=user.pk, quantity=1)
            time.sleep(max(0.0, started + (i + 1) * 0.01 - time.monotonic()))  # pacing the load, not a wait
        trickle_seconds = time.monotonic() - started
        orders = Order.objects.filter(activity=activity)
        # The orders commit before their log entries are acknowledged: wait for both, so
        # the worker is not stopped between the last batch's commit and its XDEL.
        log = ActivityKeys(activity.pk).log
        wait_until(
            lambda: orders.count() == shoppers and stock_redis().xlen(log) == 0,
            timeout=120,
            what="every reservation to become an order and leave the log",
        )
    finally:
        worker.stop()
    passes = orders.values("created_at").distinct().count()
    # While the stream lasts, a pass per pause (two when a full batch came in meanwhile:
    # the full one goes on at once), plus the first, the last and the read after the flag is
    # cleared, with room for a second drain task. Without the pause: ~100 for these 150.
    assert passes <= 2 * math.ceil(trickle_seconds / pause) + 6, (passes, trickle_seconds)
    assert Order.objects.filter(activity=activity).aggregate(u=Sum("quantity"))["u"] == shoppers
    assert stock_redis().xlen(ActivityKeys(activity.pk).log) == 0
