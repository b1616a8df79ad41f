"""The core invariant under real concurrency: real gunicorn processes, a real Celery
worker, 100+ client threads hammering the real endpoint — with the test settings' gates
off, and once more with the production values of every gate."""

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db.models import Count, Sum

from config.settings import base as production_defaults
from inventory.models import SeckillStock, StockMovement
from orders.models import AnomalyOrder, Order
from seckill.reconciliation import reconcile
from seckill.selectors import redis_remaining
from seckill.services import activity_token_ensure

from ..factories import make_activity, make_users
from ..helpers import purchase, start_celery_worker, start_gunicorn, subprocess_env, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The gates config.settings.test turns off, at their production values (production.py
# keeps base.py's defaults): the activity cache, the sold-out memory, the rate limits,
# the blacklist and shopper caches.
PRODUCTION_GATES = {
    name: str(getattr(production_defaults, name))
    for name in (
        "SECKILL_ACTIVITY_CACHE_TTL",
        "SECKILL_ACTIVITY_REDIS_TTL",
        "SECKILL_SOLD_OUT_TTL",
        "SECKILL_RATE_PER_USER",
        "SECKILL_RATE_PER_IP",
        "SECKILL_BLACKLIST_CACHE_TTL",
        "SECKILL_BLACKLIST_REDIS_TTL",
        "SECKILL_SHOPPER_CACHE_TTL",
    )
}


@pytest.fixture
def production_gates_server(transactional_db, process_logs):
    """gunicorn and a Celery worker, both with PRODUCTION_GATES; yields the base URL."""
    env = subprocess_env(**PRODUCTION_GATES)
    worker = start_celery_worker(process_logs, env=env)
    try:
        server, base = start_gunicorn(process_logs, workers=2, threads=8, env=env)
        yield base
        server.stop()
    finally:
        worker.stop()


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


def _sell_100_units_to_1000_shoppers(base: str) -> None:
    """1,000 shoppers at once for 100 units: exactly 100 answers 202 and 900 answers 410, then
    one order per reservation with both identities holding."""
    activity = make_activity(stock=100)
    users = make_users(1000)
    statuses = _hammer(base, activity, users, [1] * 1000)
    assert statuses.count(202) == 100, sorted(set(statuses))
    assert statuses.count(410) == 900
    _assert_settled(activity, 100)


def test_1000_shoppers_100_units_exactly_100_sold(web_server, celery_worker):
    _sell_100_units_to_1000_shoppers(web_server)


def test_1000_shoppers_100_units_exactly_100_sold_with_production_gates(production_gates_server):
    # One request per shopper stays under the per-user rate; the sold-out memory answers
    # 410 as Redis would.
    assert PRODUCTION_GATES["SECKILL_SOLD_OUT_TTL"] != "0.0" and PRODUCTION_GATES["SECKILL_RATE_PER_USER"] != "off"
    _sell_100_units_to_1000_shoppers(production_gates_server)


def test_mixed_quantities_with_limit_3_never_oversell(web_server, celery_worker):
    activity = make_activity(stock=100, per_user_limit=3)
    users = make_users(300)
    rng = random.Random(42)
    quantities = [rng.randint(1, 3) for _ in users]
    statuses = _hammer(web_server, activity, users, quantities)
    assert set(statuses) <= {202, 410}, sorted(set(statuses))
    _assert_settled(activity, 100)
    assert not Order.objects.filter(activity=activity, quantity__gt=3).exists()
