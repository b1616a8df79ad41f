"""The drain gives way to a flood: while reservations keep coming at a flood's rate (a
batch a second or more), the drain task writes no orders, for at most
SECKILL_DRAIN_FLOOD_DEFER seconds behind the oldest; when the flood ends, every
reservation gets its order. A real Celery worker, real Redis and PostgreSQL.

The flood is paced (a purchase every 5 ms, 200 a second: the test's load, not a wait) so
that the drain would keep up with it if it did not wait, and the worker runs with batches
of 50 and a pause of 0.5 s: a flood is 25 reservations a pause or more, eight times fewer
than the flood brings, so a busy machine slowing the test's own purchases keeps it one."""

import time

import pytest

from orders.models import Order
from seckill.purchase import purchase_reserve
from seckill.selectors import activity_snapshot
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import start_celery_worker, subprocess_env, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PURCHASE_EVERY_S = 0.005
WORKER_ENV = {"SECKILL_ORDER_BATCH_SIZE": "50", "SECKILL_DRAIN_PASS_PAUSE": "0.5"}


def _flood(snapshot, users, *, seconds: float, marks: dict[float, int] | None = None) -> int:
    """Purchases paced at PURCHASE_EVERY_S for ``seconds``; at each second of ``marks``
    the number of orders then. Returns how many were made."""
    marks = {} if marks is None else marks
    started = time.monotonic()
    bought = 0
    for user in users:
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            break
        for at in marks:
            if marks[at] < 0 and elapsed >= at:
                marks[at] = Order.objects.filter(activity_id=snapshot.id).count()
        purchase_reserve(activity=snapshot, user_id=user.pk, quantity=1)
        bought += 1
        time.sleep(max(0.0, started + bought * PURCHASE_EVERY_S - time.monotonic()))  # pacing the load
    return bought


def test_a_flood_s_orders_wait_for_its_end_then_every_reservation_is_ordered(transactional_db, process_logs):
    worker = start_celery_worker(process_logs, env=subprocess_env(SECKILL_DRAIN_FLOOD_DEFER="15", **WORKER_ENV))
    try:
        shoppers = 1200
        activity = make_activity(stock=shoppers)
        users = make_users(shoppers, prefix="flood")
        snapshot = activity_snapshot(activity.pk)
        # The first purchase asks for the drain task; its first pass and the pause that
        # tells it a flood is on are over within the first 1.5 s of a 4 s flood.
        marks = {1.5: -1, 4.0 - 0.1: -1}
        bought = _flood(snapshot, users, seconds=4.0, marks=marks)
        during = list(marks.values())
        log = ActivityKeys(activity.pk).log
        assert during[0] == during[1], f"orders were written during the flood: {during}"
        assert stock_redis().xlen(log) >= bought - during[1]
        orders = Order.objects.filter(activity=activity)
        wait_until(
            lambda: orders.count() == bought and stock_redis().xlen(log) == 0,
            timeout=120,
            what="every reservation to become an order once the flood is over",
        )
    finally:
        worker.stop()
    assert set(orders.values_list("user_id", flat=True)) == {u.pk for u in users[:bought]}


def test_a_flood_s_orders_trail_it_by_at_most_the_deferral(transactional_db, process_logs):
    """SECKILL_DRAIN_FLOOD_DEFER=1: however long the flood, the drain writes the orders
    of reservations a second old. Without that bound, a 4 s flood would end with the
    orders of its first pass only, as in the test above."""
    worker = start_celery_worker(process_logs, env=subprocess_env(SECKILL_DRAIN_FLOOD_DEFER="1", **WORKER_ENV))
    try:
        shoppers = 1200
        activity = make_activity(stock=shoppers)
        users = make_users(shoppers, prefix="lagged")
        snapshot = activity_snapshot(activity.pk)
        marks = {4.0 - 0.1: -1}
        bought = _flood(snapshot, users, seconds=4.0, marks=marks)
        (at_end,) = marks.values()
        # By then the reservations of the flood's first two seconds are over a second old:
        # 400 at the flood's pace. Half of them, for a machine slower than the pace.
        assert at_end >= 200, f"only {at_end} orders after a 4 s flood of {bought}"
        log = ActivityKeys(activity.pk).log
        orders = Order.objects.filter(activity=activity)
        wait_until(
            lambda: orders.count() == bought and stock_redis().xlen(log) == 0,
            timeout=120,
            what="every reservation to become an order",
        )
    finally:
        worker.stop()
