"""The concurrency invariants with the stock engine on a real three-master Redis
Cluster, through redis-py's cluster client (SECKILL_REDIS_CLUSTER=true)."""

import random

import pytest
import redis

from seckill.keys import ActivityKeys
from seckill.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import start_celery_worker, start_gunicorn, subprocess_env
from ..seckill.test_purchase_concurrency import _assert_settled, _hammer

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
    activity = make_activity(stock=100)
    users = make_users(1000)
    statuses = _hammer(cluster_stack, activity, users, [1] * 1000)
    assert statuses.count(202) == 100, sorted(set(statuses))
    assert statuses.count(410) == 900
    _assert_settled(activity, 100)


def test_mixed_quantities_on_the_cluster(cluster_stack):
    activity = make_activity(stock=100, per_user_limit=3)
    users = make_users(300)
    rng = random.Random(11)
    statuses = _hammer(cluster_stack, activity, users, [rng.randint(1, 3) for _ in users])
    assert set(statuses) <= {202, 410}, sorted(set(statuses))
    _assert_settled(activity, 100)
