"""The core invariant under real concurrency: real gunicorn processes, a real Celery
worker, 100+ client threads hammering the real endpoint. Each test runs on several
stacks (the ``live_stack`` fixture, its ids): "redis" (the test settings, their gates
off), "production-gates" (the production values of every gate), "rabbitmq" (the RabbitMQ
on this machine as the broker), "cluster" (the stock engine on a real three-master Redis
Cluster, through redis-py's cluster client) and "cluster-rabbitmq" (both); with one
stock key or with sharded stock ("8-shards": S = 8)."""

import json
import random
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db.models import Count, Sum

from config.settings import base as production_defaults
from inventory.models import SeckillStock, StockMovement
from orders.models import AnomalyOrder, Order
from seckill.sale.activities import activity_token_ensure
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining

from ..factories import make_activity, make_users
from ..helpers import SHARDS, purchase, shard_stocks, start_celery_worker, start_gunicorn, subprocess_env, wait_until

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


@dataclass
class LiveStack:
    """A Celery worker and gunicorn (2 workers x 8 threads) on one environment."""

    base: str
    after_the_sale: Callable[[], None]  # this stack's own checks once the queue is drained


def _rabbitmq_checks(base: str, queue: str) -> Callable[[], None]:
    operator = {"Authorization": f"Bearer {settings.METRICS_TOKEN}"}

    def scrape(path: str) -> str:
        with urllib.request.urlopen(urllib.request.Request(f"{base}{path}", headers=operator), timeout=30) as response:
            return response.read().decode()

    def check():
        assert json.loads(scrape("/healthz"))["broker"]["status"] == "ok"
        # Each process keeps its broker reading for a second.
        wait_until(
            lambda: f'seckill_queue_depth{{queue="{queue}"}} 0.0' in scrape("/metrics"),
            timeout=30,
            what="an empty queue in the metrics",
        )

    return check


@pytest.fixture
def live_stack(request, transactional_db, process_logs):
    """The stack named by the test's parameter (indirect): "redis", "production-gates",
    "rabbitmq", "cluster" or "cluster-rabbitmq" (see the module's docstring). On RabbitMQ
    each test has a queue of its own (``rabbit_env``, tests/conftest.py); on the cluster
    the test process's stock engine is the cluster too (``on_cluster``)."""
    variant = request.param
    if variant == "production-gates":
        # One request per shopper stays under the per-user rate; the sold-out memory answers
        # 410 as Redis would.
        assert PRODUCTION_GATES["SECKILL_SOLD_OUT_TTL"] != "0.0" and PRODUCTION_GATES["SECKILL_RATE_PER_USER"] != "off"
        env = subprocess_env(**PRODUCTION_GATES)
    elif variant in ("rabbitmq", "cluster-rabbitmq"):
        env = dict(request.getfixturevalue("rabbit_env"))
    else:
        assert variant in ("redis", "cluster"), variant
        env = subprocess_env()
    if variant.startswith("cluster"):
        env.update(request.getfixturevalue("on_cluster"))
    worker = start_celery_worker(process_logs, env=env)
    try:
        web, base = start_gunicorn(process_logs, workers=2, threads=8, env=env)
        try:
            if "rabbitmq" in variant:
                assert "transport:   amqp://guest" in worker.log(), worker.log()[-2000:]
            if variant == "rabbitmq":
                yield LiveStack(base, _rabbitmq_checks(base, env["CELERY_TASK_DEFAULT_QUEUE"]))
            else:
                yield LiveStack(base, lambda: None)
        finally:
            web.stop()
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
    """One order per reservation (no shopper twice), Redis and the database at 0, no
    anomaly, every unit deducted once, both identities holding."""
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
    if activity.shards > 1:
        assert shard_stocks(activity) == [0] * activity.shards


@pytest.mark.parametrize(
    ("live_stack", "shards"),
    [
        pytest.param("redis", 1, id="redis"),
        pytest.param("production-gates", 1, id="production-gates"),
        pytest.param("rabbitmq", 1, id="rabbitmq"),
        pytest.param("cluster", 1, id="cluster"),
        pytest.param("redis", SHARDS, id="redis-8-shards"),
        pytest.param("cluster", SHARDS, id="cluster-8-shards"),
        pytest.param("cluster-rabbitmq", SHARDS, id="cluster-rabbitmq-8-shards"),
    ],
    indirect=["live_stack"],
)
def test_1000_shoppers_100_units_exactly_100_sold(live_stack, shards):
    """1,000 shoppers at once for 100 units: exactly 100 answers 202 and 900 answers 410, then
    one order per reservation with both identities holding (and every shard at 0)."""
    activity = make_activity(stock=100, shards=shards)
    users = make_users(1000)
    statuses = _hammer(live_stack.base, activity, users, [1] * 1000)
    assert statuses.count(202) == 100, sorted(set(statuses))
    assert statuses.count(410) == 900
    _assert_settled(activity, 100)
    live_stack.after_the_sale()


@pytest.mark.parametrize(
    ("live_stack", "shards", "shoppers", "seed"),
    [
        pytest.param("redis", 1, 300, 42, id="redis"),
        pytest.param("rabbitmq", 1, 300, 7, id="rabbitmq"),
        pytest.param("cluster", 1, 300, 11, id="cluster"),
        pytest.param("redis", SHARDS, 600, 42, id="redis-8-shards"),
        pytest.param("cluster", SHARDS, 600, 11, id="cluster-8-shards"),
    ],
    indirect=["live_stack"],
)
def test_mixed_quantities_with_limit_3_never_oversell(live_stack, shards, shoppers, seed):
    activity = make_activity(stock=100, per_user_limit=3, shards=shards)
    users = make_users(shoppers)
    rng = random.Random(seed)
    quantities = [rng.randint(1, 3) for _ in users]
    statuses = _hammer(live_stack.base, activity, users, quantities)
    assert set(statuses) <= {202, 410}, sorted(set(statuses))
    _assert_settled(activity, 100)
    assert not Order.objects.filter(activity=activity, quantity__gt=3).exists()
