"""The concurrency invariants with the stock engine on a real three-master Redis
Cluster, through redis-py's cluster client (SECKILL_REDIS_CLUSTER=true); with sharded
stock (S = 8), on the Redis broker and on RabbitMQ."""

import random

import pytest
import redis

from seckill.keys import ActivityKeys
from seckill.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import start_celery_worker, start_gunicorn, subprocess_env
from ..seckill.test_purchase_concurrency import _assert_settled, _hammer, _sell_100_units_to_1000_shoppers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cluster_stack(on_cluster, process_logs):
    env = subprocess_env(**on_cluster)
    worker = start_celery_worker(process_logs, env=env)
    web, base = start_gunicorn(process_logs, workers=2, threads=8, env=env)
    yield base
    web.stop()
    worker.stop()


def test_activities_spread_over_the_cluster_nodes(on_cluster):
    client = stock_redis()
    assert isinstance(client, redis.RedisCluster)
    activities = [make_activity(stock=5) for _ in range(6)]
    nodes = {client.get_node_from_key(ActivityKeys(a.pk).stock).name for a in activities}
    assert len(nodes) >= 2, "six activities' hash tags all landed on one node"
    for activity in activities:
        assert int(client.get(ActivityKeys(activity.pk).stock)) == 5


def test_1000_shoppers_100_units_on_the_cluster(cluster_stack):
    _sell_100_units_to_1000_shoppers(cluster_stack)


def test_mixed_quantities_on_the_cluster(cluster_stack):
    activity = make_activity(stock=100, per_user_limit=3)
    users = make_users(300)
    rng = random.Random(11)
    statuses = _hammer(cluster_stack, activity, users, [rng.randint(1, 3) for _ in users])
    assert set(statuses) <= {202, 410}, sorted(set(statuses))
    _assert_settled(activity, 100)


# --- sharded stock (S = 8): shards and user partitions spread over the nodes ----------

SHARDS = 8


def _shard_stocks(activity) -> list[int]:
    client = stock_redis()
    return [int(client.get(k.stock)) for k in ActivityKeys(activity.pk).shards(SHARDS)]


def test_shards_and_partitions_spread_over_the_cluster_nodes(on_cluster):
    client = stock_redis()
    activity = make_activity(stock=80, shards=SHARDS)
    keys = ActivityKeys(activity.pk)
    shard_nodes = {client.get_node_from_key(k.stock).name for k in keys.shards(SHARDS)}
    partition_nodes = {client.get_node_from_key(keys.partition(p).users).name for p in range(16)}
    assert len(shard_nodes) >= 2 and len(partition_nodes) >= 2, (shard_nodes, partition_nodes)
    assert _shard_stocks(activity) == [10] * SHARDS


def test_1000_shoppers_100_units_on_8_shards_on_the_cluster(cluster_stack):
    activity = make_activity(stock=100, shards=SHARDS)
    users = make_users(1000)
    statuses = _hammer(cluster_stack, activity, users, [1] * 1000)
    assert statuses.count(202) == 100, sorted(set(statuses))
    assert statuses.count(410) == 900
    _assert_settled(activity, 100)
    assert _shard_stocks(activity) == [0] * SHARDS


@pytest.fixture
def cluster_rabbit_stack(on_cluster, rabbit_env, process_logs):
    """The cluster as the stock engine and the RabbitMQ on this machine as the broker."""
    env = {**rabbit_env, **on_cluster}
    worker = start_celery_worker(process_logs, env=env)
    web, base = start_gunicorn(process_logs, workers=2, threads=8, env=env)
    assert "transport:   amqp://guest" in worker.log(), worker.log()[-2000:]
    yield base
    web.stop()
    worker.stop()


def test_1000_shoppers_100_units_on_8_shards_on_the_cluster_with_rabbitmq(cluster_rabbit_stack):
    activity = make_activity(stock=100, shards=SHARDS)
    users = make_users(1000)
    statuses = _hammer(cluster_rabbit_stack, activity, users, [1] * 1000)
    assert statuses.count(202) == 100, sorted(set(statuses))
    assert statuses.count(410) == 900
    _assert_settled(activity, 100)  # no shopper twice, DB available 0, no anomaly, identities hold
    assert _shard_stocks(activity) == [0] * SHARDS


def test_mixed_quantities_on_8_shards_on_the_cluster(cluster_stack):
    activity = make_activity(stock=100, per_user_limit=3, shards=SHARDS)
    users = make_users(600)
    rng = random.Random(11)
    statuses = _hammer(cluster_stack, activity, users, [rng.randint(1, 3) for _ in users])
    assert set(statuses) <= {202, 410}, sorted(set(statuses))
    _assert_settled(activity, 100)
    assert _shard_stocks(activity) == [0] * SHARDS


def test_sharded_lifecycle_on_the_cluster(on_cluster, django_capture_on_commit_callbacks):
    """Replay, cancel (back to the order's shard), reconciliation and key removal, each
    script on one slot of the cluster."""
    from django.conf import settings

    from orders.models import Order
    from orders.services import order_cancel
    from seckill.reconciliation import reconcile
    from seckill.scripts import ScriptCode, run_reserve
    from seckill.services import activity_keys_remove, reservations_replay

    activity = make_activity(stock=40, shards=SHARDS)
    users = make_users(12)
    for user in users:
        reply = run_reserve(
            stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=1, limit=1,
            shards=SHARDS, partitions=settings.SECKILL_USER_PARTITIONS,
        )  # fmt: skip
        assert reply.code == ScriptCode.RESERVED
    assert reservations_replay(activity_id=activity.pk, grace_seconds=-1).created == 12
    order = Order.objects.filter(activity=activity).first()
    before = _shard_stocks(activity)
    with django_capture_on_commit_callbacks(execute=True):
        order_cancel(order=order, reason="shopper")
    assert _shard_stocks(activity)[order.shard] == before[order.shard] + 1
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["redis_remaining"] == 29, report
    activity_keys_remove(activity_id=activity.pk)
    assert not list(stock_redis().scan_iter(match=f"*{{a{activity.pk}[}}su]*"))
