"""The Redis connection of the stock engine (the Lua scripts).

Kept apart from Django's cache so that its URL (``SECKILL_REDIS_URL``), timeouts and
pool can be set for the purchase path alone.
"""

from functools import lru_cache
from typing import TypeAlias

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from core.memory import register_reset

# A single Redis or a Redis Cluster (SECKILL_REDIS_CLUSTER): the engine uses only commands
# both clients have.
StockRedis: TypeAlias = redis.Redis | redis.RedisCluster


@lru_cache(maxsize=1)
def stock_redis() -> StockRedis:
    # redis-py's pool notices a fork and reconnects, so one client per process is safe
    # under gunicorn's pre-fork model and Celery's prefork pool.
    options = {"socket_connect_timeout": 1, "socket_timeout": 2, "health_check_interval": 30, "max_connections": 200}
    if settings.SECKILL_REDIS_CLUSTER:
        # Redis Cluster: the URL names any node; the client learns the slot map from it.
        # Every key one script touches shares a hash tag, so each call has one slot.
        # Its own retry (default: 10 more tries) would send a script again after a lost
        # reply; its node connections never retry (redis-py sets that itself).
        try:
            return _Cluster.from_url(settings.SECKILL_REDIS_URL, retry=no_retries(), **options)
        except redis.RedisClusterException as exc:  # no node answers: not cached, the next call tries again
            raise redis.ConnectionError(str(exc)) from exc
    return redis.Redis.from_url(settings.SECKILL_REDIS_URL, retry=no_retries(), **options)


class _Cluster(redis.RedisCluster):
    """redis-py raises RedisClusterException, which is no RedisError, when no node of the
    cluster answers (a partition between a web host and the cluster); every caller of the
    engine handles RedisError (the breaker, 503 busy), so it is raised as a ConnectionError."""

    def execute_command(self, *args, **kwargs):
        try:
            return super().execute_command(*args, **kwargs)
        except redis.RedisClusterException as exc:
            raise redis.ConnectionError(str(exc)) from exc


def no_retries() -> Retry:
    """The retry policy of every Redis client of the project: none. A command whose
    reply is lost (connection dropped, timeout) may have run, and most of what the
    engine sends writes (the stock scripts are not idempotent): sending it again could
    sell a unit twice. The error goes to the caller, which knows what an unknown outcome
    means (the purchase answers busy); a client that lost its connection reconnects on
    the next command."""
    return Retry(NoBackoff(), 0)


@register_reset
def reset_stock_redis() -> None:
    """Forget the client (tests point the settings at another Redis)."""
    stock_redis.cache_clear()
