"""One drain task per burst: purchases publish a message only when no drain task is at
work, and every reservation still gets its order without waiting for the replay."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from celery.signals import before_task_publish
from django.db.models import Sum

from orders.models import Order
from seckill.keys import ActivityKeys
from seckill.redis_client import stock_redis
from seckill.selectors import activity_snapshot
from seckill.services import purchase_reserve

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
