"""The stock engine on a real three-master Redis Cluster, through redis-py's cluster
client (SECKILL_REDIS_CLUSTER=true): activities, shards (S = 8) and user partitions spread
over the nodes, and the sharded lifecycle with each script on one slot. The concurrency
invariants on the cluster (Redis broker and RabbitMQ, one key and 8 shards) are the
"cluster" cases of tests/seckill/test_purchase_concurrency.py."""

import pytest
import redis

from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import SHARDS, shard_stocks

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_activities_spread_over_the_cluster_nodes(on_cluster):
    client = stock_redis()
    assert isinstance(client, redis.RedisCluster)
    activities = [make_activity(stock=5) for _ in range(6)]
    nodes = {client.get_node_from_key(ActivityKeys(a.pk).stock).name for a in activities}
    assert len(nodes) >= 2, "six activities' hash tags all landed on one node"
    for activity in activities:
        assert int(client.get(ActivityKeys(activity.pk).stock)) == 5


def test_shards_and_partitions_spread_over_the_cluster_nodes(on_cluster):
    client = stock_redis()
    activity = make_activity(stock=80, shards=SHARDS)
    keys = ActivityKeys(activity.pk)
    shard_nodes = {client.get_node_from_key(k.stock).name for k in keys.shards(SHARDS)}
    partition_nodes = {client.get_node_from_key(keys.partition(p).users).name for p in range(16)}
    assert len(shard_nodes) >= 2 and len(partition_nodes) >= 2, (shard_nodes, partition_nodes)
    assert shard_stocks(activity) == [10] * SHARDS


def test_sharded_lifecycle_on_the_cluster(on_cluster, django_capture_on_commit_callbacks):
    """Replay, cancel (back to the order's shard), reconciliation and key removal, each
    script on one slot of the cluster."""

    from orders.models import Order
    from orders.services.lifecycle import order_cancel
    from seckill.sale.lifecycle import activity_keys_remove
    from seckill.sale.reconciliation import reconcile
    from seckill.sale.replay import reservations_replay
    from stock.layout import StockLayout
    from stock.scripts import ScriptCode

    activity = make_activity(stock=40, shards=SHARDS)
    users = make_users(12)
    for user in users:
        reply = StockLayout(activity.pk, SHARDS).reserve(stock_redis(), user_id=user.pk, quantity=1, limit=1)
        assert reply.code == ScriptCode.RESERVED
    assert reservations_replay(activity_id=activity.pk, grace_seconds=-1).created == 12
    order = Order.objects.filter(activity=activity).first()
    before = shard_stocks(activity)
    with django_capture_on_commit_callbacks(execute=True):
        order_cancel(order=order, reason="shopper")
    assert shard_stocks(activity)[order.shard] == before[order.shard] + 1
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["redis_remaining"] == 29, report
    activity_keys_remove(activity_id=activity.pk)
    assert not list(stock_redis().scan_iter(match=f"*{{a{activity.pk}[}}su]*"))


def test_a_batch_of_expiries_returns_together_on_the_cluster(on_cluster):
    """The returns of a batch go in pipelines whose scripts live on several nodes' slots,
    on primaries that have not loaded the scripts yet: each unit back in its shard once,
    each shopper free to buy again."""
    from datetime import timedelta

    from django.utils import timezone

    from orders.models import Order
    from orders.services.lifecycle import orders_expire_overdue
    from seckill.sale.reconciliation import reconcile
    from seckill.sale.replay import reservations_replay
    from stock.layout import StockLayout
    from stock.scripts import CLAIM_SETTLE, SHARD_RETURN, ScriptCode

    activity = make_activity(stock=40, shards=SHARDS)
    users = make_users(24)
    layout = StockLayout(activity.pk, SHARDS)
    for user in users:
        assert layout.reserve(stock_redis(), user_id=user.pk, quantity=1, limit=1).code == ScriptCode.RESERVED
    assert reservations_replay(activity_id=activity.pk, grace_seconds=-1).created == 24
    Order.objects.filter(activity=activity).update(pay_deadline=timezone.now() - timedelta(seconds=1))
    stock_redis().script_flush()
    assert not any(stock_redis().script_exists(SHARD_RETURN.sha, CLAIM_SETTLE.sha)), "a primary kept the scripts"

    assert orders_expire_overdue(activity_id=activity.pk) == 24
    assert sum(shard_stocks(activity)) == 40
    client = stock_redis()
    assert not any(client.hexists(layout.users_of(u.pk).users, u.pk) for u in users)
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["buckets"]["cancelled_not_returned"] == 0, report
