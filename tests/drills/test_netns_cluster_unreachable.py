"""What drill 1 found: a web host that reaches no node of the stock Redis Cluster must see a
RedisError (the breaker, 503 busy), not redis-py's RedisClusterException, which is no
RedisError and which nothing in the project catches (500s). Real cluster nodes, stopped."""

import pytest
import redis

from stock.redis_client import reset_stock_redis, stock_redis


@pytest.mark.slow
def test_a_cluster_with_no_reachable_node_is_a_connection_error(redis_cluster, on_cluster):
    client = stock_redis()
    assert client.set("seckill:{a0}:probe", 1)
    redis_cluster.stop()  # every node gone: this module's cluster, no other test uses it
    with pytest.raises(redis.ConnectionError):
        client.get("seckill:{a0}:probe")
    reset_stock_redis()
    with pytest.raises(redis.ConnectionError):  # a new client: the start-up nodes do not answer
        stock_redis()
