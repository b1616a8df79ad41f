"""stock.redis_client.thread_client: one connection per thread, never shared across a
fork, and a Redis that is away fails at the command, where callers handle it."""

import os
import threading

import pytest
import redis
from django.conf import settings

from stock.redis_client import no_retries, reset_stock_redis, stock_redis, thread_client

# A Redis Cluster's client is one per process by design (a pool per node).
pytestmark = pytest.mark.skipif(settings.SECKILL_REDIS_CLUSTER, reason="the stock Redis is a Cluster")


def test_each_thread_keeps_its_own_connection_of_the_shared_pool():
    mine = stock_redis()
    assert stock_redis() is mine, "a thread's client is made once"
    assert mine.connection is not None, "a single-connection client"
    theirs: list[redis.Redis] = []
    worker = threading.Thread(target=lambda: theirs.append(stock_redis()))
    worker.start()
    worker.join(timeout=30)
    assert theirs and theirs[0] is not mine
    assert theirs[0].connection is not mine.connection
    assert theirs[0].connection_pool is mine.connection_pool, "one pool per process"
    assert mine.ping() and theirs[0].ping()


def test_a_new_pool_replaces_the_threads_client():
    before = stock_redis()
    reset_stock_redis()
    after = stock_redis()
    assert after is not before
    assert after.connection_pool is not before.connection_pool
    assert after.ping()


def test_with_redis_away_the_command_fails_not_the_lookup():
    # The project's retry policy (none): redis-py's default backs off for seconds first.
    away = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1, retry=no_retries())
    client = thread_client("test-away", "away", lambda: away)
    assert client is away, "the pooled client, whose command raises where its caller expects"
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert thread_client("test-away", "away", lambda: away) is away, "not tried again at once"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_makes_its_own_connection():
    parent = stock_redis()
    parent_socket = parent.connection._sock
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanup
        try:
            child = stock_redis()
            ok = child is not parent and child.connection._sock is not parent_socket and child.ping()
            os.write(write, b"1" if ok else b"0")
        except BaseException:
            os.write(write, b"E")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert parent.ping(), "the parent's connection is untouched by the child"


def test_a_redis_that_restarted_is_met_on_a_new_connection(tmp_path):
    """The pool checks a connection before it hands it out; a held one is checked before
    each command, so a restart does not fail one command per thread."""
    from .drills.infra import RedisServer
    from .helpers import free_port

    server = RedisServer(free_port(), tmp_path, name="restarting").start()
    try:
        shared = redis.Redis.from_url(server.url, socket_timeout=2)
        client = thread_client("test-restart", server.url, lambda: shared)
        assert client.set("k", "1") and client.get("k") == b"1"
        server.kill()
        server.start()
        assert client.get("k") is None, "an empty Redis, reached on a new connection"
        assert thread_client("test-restart", server.url, lambda: shared) is client
    finally:
        server.stop()
