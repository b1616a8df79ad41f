"""The Redis connection of the stock engine (the Lua scripts).

Kept apart from Django's cache so that its URL (``SECKILL_REDIS_URL``), timeouts and
pool can be set for the purchase path alone.

**A connection per thread.** A command through redis-py's pool costs a purchase more
than the command itself: taking a connection, its telemetry, giving it back (about 40 µs
of Python a command, and a purchase sends two: docs/DESIGN-NOTES.md).
``thread_client`` gives each thread a client that keeps one connection of the shared
pool for the thread's life; pipelines and pub/sub still take theirs from the pool.

**On the event loop** (``core.loop_bridge.run_on_loop``: the purchases the server runs
there) the same client sends each command, and each pipeline, on the loop's connection
(``stock.loop_redis``), and the purchase waits for the reply without blocking the loop;
the reply is parsed by the client's own response callbacks, as on a thread: one code
path, two ways of waiting.
"""

import logging
import os
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple, TypeAlias

import redis
from django.conf import settings
from django_redis import get_redis_connection
from redis.backoff import NoBackoff
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.driver_info import DriverInfo
from redis.retry import Retry

from core.loop_bridge import await_only, on_loop
from core.memory import register_reset

from .loop_redis import loop_redis

logger = logging.getLogger(__name__)

# A single Redis or a Redis Cluster (SECKILL_REDIS_CLUSTER): the engine uses only commands
# both clients have.
StockRedis: TypeAlias = redis.Redis | redis.RedisCluster


def stock_redis() -> StockRedis:
    """This thread's client of the stock Redis (a Cluster's client is shared: it keeps a
    pool per node and has no single-connection mode)."""
    shared = _stock_redis_shared()
    if isinstance(shared, redis.RedisCluster):
        return shared
    return thread_client("stock", shared, lambda: shared, url=settings.SECKILL_REDIS_URL)


def cache_redis() -> redis.Redis:
    """This thread's client of the cache Redis (django-redis ``default``), by its URL."""
    url = settings.CACHES["default"]["LOCATION"]
    return thread_client("cache", url, lambda: get_redis_connection("default"), url=url)


_threads = threading.local()


def thread_client(name: str, key: object, shared: Callable[[], redis.Redis], *, url: str = "") -> redis.Redis:
    """A client that holds one connection of ``shared()``'s pool for this thread, made
    again when ``key`` (what names that pool) changes.

    Its connection is made when it is created: with Redis away this thread uses the
    pooled client itself for a second (its command fails where the caller handles Redis
    errors) before it tries again. A client inherited through a fork is the parent's
    socket: the child makes its own (redis-py never shuts a socket another process
    opened). A thread that ends gives its connection back to the pool."""
    clients: dict[str, _Held] = _threads.__dict__.setdefault("clients", {})
    held = clients.get(name)
    pid = os.getpid()
    if held is not None and held.pid == pid and held.key == key:
        if held.client is not None:
            return held.client
        if time.monotonic() < held.retry_at:
            return held.pooled
    pooled = shared()
    try:
        client = _HeldConnection(connection_pool=pooled.connection_pool, single_connection_client=True)
        client.url = url
    except redis.RedisError:
        clients[name] = _Held(pid, key, pooled, None, time.monotonic() + 1.0)
        return pooled
    clients[name] = _Held(pid, key, pooled, client, 0.0)
    return client


class _HeldConnection(redis.Redis):
    """A single-connection client that checks its connection before each command as the
    pool checks one it hands out: a socket with data waiting or closed by the server (a
    Redis that restarted) is dropped and the command goes on a new connection, instead of
    failing once per thread after every restart. A non-blocking read, no pool round."""

    url = ""  # what its asyncio twin connects to, on the event loop

    def execute_command(self, *args, **options):
        if on_loop():
            (reply,) = await_only(loop_redis(self.url).execute(args))
            return _parsed(self, args[0], reply, options)
        self._stray_dropped()
        return super().execute_command(*args, **options)

    def pipeline(self, transaction=True, shard_hint=None) -> redis.client.Pipeline:
        pipe = _LoopablePipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.url = self.url
        return pipe

    def _stray_dropped(self) -> None:
        connection = self.connection
        if connection is not None and connection.is_connected:
            try:
                stray = connection.can_read()
            except (redis.ConnectionError, OSError):
                stray = True
            if stray:
                connection.disconnect()


class _LoopablePipeline(redis.client.Pipeline):
    """A pipeline that, on the event loop, is sent on the loop's connection (not a
    transaction there: MULTI/EXEC would interleave with other purchases' commands)."""

    url = ""

    def execute(self, raise_on_error: bool = True):
        if not on_loop():
            return super().execute(raise_on_error)
        if vars(self).get("transaction"):  # Pipeline.__init__'s flag (its class has a method of that name)
            raise RuntimeError("a Redis transaction (MULTI/EXEC) cannot run on the event loop's connection")
        commands = list(self.command_stack)
        self.reset()
        replies = await_only(loop_redis(self.url).execute(*(args for args, _ in commands)))
        results = []
        for (args, options), reply in zip(commands, replies, strict=True):
            try:
                results.append(_parsed(self, args[0], reply, dict(options)))
            except redis.ResponseError as exc:
                if raise_on_error:
                    raise
                results.append(exc)
        return results


def _parsed(client: redis.Redis, command_name, reply, options: dict):
    """What redis-py's ``parse_response`` makes of a reply: an error raised (or the
    command's EMPTY_RESPONSE), else the client's response callback applied."""
    if isinstance(reply, redis.ResponseError):
        if EMPTY_RESPONSE in options:
            return options[EMPTY_RESPONSE]
        raise reply
    for name in (EMPTY_RESPONSE, NEVER_DECODE, "keys"):
        options.pop(name, None)
    callback = client.response_callbacks.get(command_name)
    return callback(reply, **options) if callback else reply


class _Held(NamedTuple):
    pid: int
    key: object
    pooled: redis.Redis
    client: redis.Redis | None
    retry_at: float


# What each new connection tells Redis about its client (CLIENT SETINFO), found once: left
# to redis-py, every connection looks its version up in the installed packages' metadata
# (a scan of sys.path, a millisecond or more; on a busy web process's event loop, tens).
DRIVER_INFO = DriverInfo()


# A connect on a LAN takes well under a millisecond: 0.5 s is a host that is not there.
CLIENT_OPTIONS = {
    "socket_connect_timeout": 0.5,
    "socket_timeout": 2,
    "health_check_interval": 30,
    "max_connections": 200,
}


@lru_cache(maxsize=1)
def _stock_redis_shared() -> StockRedis:
    # redis-py's pool notices a fork and reconnects, so one pool per process is safe
    # under gunicorn's pre-fork model and Celery's prefork pool.
    options = {**CLIENT_OPTIONS, "driver_info": DRIVER_INFO}
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
    engine handles RedisError (the breaker, 503 busy), so it is raised as a ConnectionError.

    After a connection error or a timeout redis-py's client learns the slot map again before
    the command fails, asking node after node, a timeout each when the network is cut; and
    each thread that met the error waits its turn to ask again, since a relearning that
    failed leaves nothing to skip. A web process's event loop was held for seconds, its pool
    threads for seconds each in turn, before the breaker could open. Here the relearning
    runs in a thread of its own, one at a time, and the command fails at once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)  # the first slot map is learnt here, before the command
        self.nodes_manager.initialize = _behind(self.nodes_manager.initialize)  # type: ignore[method-assign]

    def execute_command(self, *args, **kwargs):
        try:
            return super().execute_command(*args, **kwargs)
        except redis.RedisClusterException as exc:
            raise redis.ConnectionError(str(exc)) from exc


def _behind(initialize: Callable[..., None]) -> Callable[..., None]:
    """``initialize`` started in a thread of its own unless one is running, and back at
    once. Until it ends the client keeps the slot map it had: a command that meets a moved
    slot is redirected as usual, one that meets an unreachable node fails (and starts the
    next relearning). redis-py's nodes manager is made to be refreshed from any thread."""
    running: dict[int, threading.Lock] = {}  # by process: a fork copies a held lock, not its thread

    def relearn(one_at_a_time: threading.Lock, *args, **kwargs) -> None:
        try:
            initialize(*args, **kwargs)
        except (redis.RedisClusterException, redis.RedisError) as exc:  # no node answers
            logger.warning("stock Redis Cluster: the slot map could not be learnt again: %s", exc)
        finally:
            one_at_a_time.release()

    def initialize_behind(*args, **kwargs) -> None:
        one_at_a_time = running.setdefault(os.getpid(), threading.Lock())
        if one_at_a_time.acquire(blocking=False):
            thread = threading.Thread(target=relearn, args=(one_at_a_time, *args), kwargs=kwargs, daemon=True)
            thread.start()

    return initialize_behind


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
    """Forget the client (tests point the settings at another Redis); every thread's
    client is of the old pool and is made again on its next call."""
    _stock_redis_shared.cache_clear()
