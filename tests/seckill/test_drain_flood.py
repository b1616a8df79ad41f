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
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.snapshot import activity_snapshot
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import start_celery_worker, subprocess_env, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PURCHASE_EVERY_S = 0.005
FLOOD_S = 4.0
SHOPPERS = 1200
WORKER_ENV = {"SECKILL_ORDER_BATCH_SIZE": "50", "SECKILL_DRAIN_PASS_PAUSE": "0.5"}


def _flood(process_logs, *, defer: str, prefix: str, marks: dict[float, int]) -> tuple[int, int]:
    """A worker with ``SECKILL_DRAIN_FLOOD_DEFER=defer``, a 4 s flood of purchases paced at
    PURCHASE_EVERY_S, the number of orders at each second of ``marks`` (filled in), then a
    wait until every reservation is ordered. Returns (purchases made, the log's length right
    after the flood)."""
    worker = start_celery_worker(process_logs, env=subprocess_env(SECKILL_DRAIN_FLOOD_DEFER=defer, **WORKER_ENV))
    try:
        users = make_users(SHOPPERS, prefix=prefix)
        snapshot = activity_snapshot(make_activity(stock=SHOPPERS).pk)
        orders = Order.objects.filter(activity_id=snapshot.id)
        started = time.monotonic()
        bought = 0
        for user in users:
            elapsed = time.monotonic() - started
            if elapsed >= FLOOD_S:
                break
            for at in marks:
                if marks[at] < 0 and elapsed >= at:
                    marks[at] = orders.count()
            purchase_reserve(activity=snapshot, user_id=user.pk, quantity=1)
            bought += 1
            time.sleep(max(0.0, started + bought * PURCHASE_EVERY_S - time.monotonic()))  # pacing the load
        log = ActivityKeys(snapshot.id).log
        log_after = stock_redis().xlen(log)
        wait_until(
            lambda: orders.count() == bought and stock_redis().xlen(log) == 0,
            timeout=120,
            what="every reservation to become an order",
        )
    finally:
        worker.stop()
    assert set(orders.values_list("user_id", flat=True)) == {u.pk for u in users[:bought]}
    return bought, log_after


def test_a_flood_s_orders_wait_for_its_end_then_every_reservation_is_ordered(transactional_db, process_logs):
    # The first purchase asks for the drain task; its first pass and the pause that tells
    # it a flood is on are over within the first 1.5 s of the 4 s flood.
    marks = {1.5: -1, FLOOD_S - 0.1: -1}
    bought, log_after = _flood(process_logs, defer="15", prefix="flood", marks=marks)
    early, late = marks[1.5], marks[FLOOD_S - 0.1]
    assert early == late, f"orders were written during the flood: {early} then {late}"
    assert log_after >= bought - late, "the flood's reservations wait in the log"


def test_a_flood_s_orders_trail_it_by_at_most_the_deferral(transactional_db, process_logs):
    """SECKILL_DRAIN_FLOOD_DEFER=1: however long the flood, the drain writes the orders
    of reservations a second old. Without that bound, a 4 s flood would end with the
    orders of its first pass only, as in the test above."""
    marks = {FLOOD_S - 0.1: -1}
    bought, _ = _flood(process_logs, defer="1", prefix="lagged", marks=marks)
    # By then the reservations of the flood's first two seconds are over a second old:
    # 400 at the flood's pace. Half of them, for a machine slower than the pace.
    at_end = marks[FLOOD_S - 0.1]
    assert at_end >= 200, f"only {at_end} orders after a 4 s flood of {bought}"
