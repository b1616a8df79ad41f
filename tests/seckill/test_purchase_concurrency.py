"""The core invariant under real concurrency: real gunicorn processes, a real Celery
worker, 100+ client threads hammering the real endpoint."""

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db.models import Count, Sum

from inventory.models import SeckillStock, StockMovement
from orders.models import AnomalyOrder, Order
from seckill.reconciliation import reconcile
from seckill.selectors import redis_remaining
from seckill.services import activity_token_ensure

from ..factories import make_activity, make_users
from ..helpers import purchase, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _hammer(base, activity, users, quantities):
    from rest_framework.authtoken.models import Token

    keys = dict(Token.objects.filter(user__in=users).values_list("user_id", "key"))
    token = activity_token_ensure(activity_id=activity.pk)
    jobs = [(keys[u.pk], q) for u, q in zip(users, quantities, strict=True)]
    with ThreadPoolExecutor(max_workers=120) as pool:
        return list(pool.map(lambda job: purchase(base, activity.pk, job[0], token, quantity=job[1])[0], jobs))


def _assert_settled(activity, expected_units):
    wait_until(
        lambda: (Order.objects.filter(activity=activity).aggregate(u=Sum("quantity"))["u"] or 0) >= expected_units,
        timeout=120,
        what="the queue to drain",
    )
    orders = Order.objects.filter(activity=activity)
    assert orders.aggregate(u=Sum("quantity"))["u"] == expected_units
    assert not orders.values("user").annotate(n=Count("id")).filter(n__gt=1).exists(), "a shopper has two orders"
    assert redis_remaining(activity.pk) == 0
    assert SeckillStock.objects.get(activity=activity).available == 0
    assert not AnomalyOrder.objects.filter(activity=activity).exists()
    assert (
        StockMovement.objects.filter(activity=activity, kind="deduct").aggregate(u=Sum("quantity"))["u"]
        == expected_units
    )
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
    assert report["reserved_not_ordered"] == 0


def test_1000_shoppers_100_units_exactly_100_sold(web_server, celery_worker):
    activity = make_activity(stock=100)
    users = make_users(1000)
    statuses = _hammer(web_server, activity, users, [1] * 1000)
    assert statuses.count(202) == 100, sorted(set(statuses))
    assert statuses.count(410) == 900
    _assert_settled(activity, 100)


def test_mixed_quantities_with_limit_3_never_oversell(web_server, celery_worker):
    activity = make_activity(stock=100, per_user_limit=3)
    users = make_users(300)
    rng = random.Random(42)
    quantities = [rng.randint(1, 3) for _ in users]
    statuses = _hammer(web_server, activity, users, quantities)
    assert set(statuses) <= {202, 410}, sorted(set(statuses))
    _assert_settled(activity, 100)
    assert not Order.objects.filter(activity=activity, quantity__gt=3).exists()
