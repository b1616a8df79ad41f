"""Neither Redis client retries a command by itself: a script whose reply is lost on the
way back (it ran on the server) is an error for its caller, never a second run. Real
Redis and a real Redis Cluster; the only thing faked is the lost reply, at the socket
read of the one command."""

import pytest
import redis
from django.core.cache import cache
from redis.connection import Connection

from stock.redis_client import stock_redis
from stock.scripts import SHARD_PURCHASE

from ..factories import make_activity, make_users
from ..helpers import reserve, shard_stocks

pytestmark = pytest.mark.django_db(transaction=True)

LOST = [redis.ConnectionError, redis.TimeoutError]


class LostReply:
    """The first ``command`` (with ``arg`` as its first argument, if given) runs on the
    server, then its reply is lost: the client reads ``error`` instead. ``ran`` counts
    how many times the server answered that command (each answer is one run)."""

    def __init__(self, monkeypatch, error: type[Exception], command: str, arg: str | None = None):
        self.ran, self.lost = 0, False
        send, read = Connection.send_command, Connection.read_response

        def send_command(conn, *args, **kwargs):
            conn._watched = args[0] == command and (arg is None or args[1] == arg)
            return send(conn, *args, **kwargs)

        def read_response(conn, *args, **kwargs):
            response = read(conn, *args, **kwargs)  # a NOSCRIPT error is raised here: nothing ran
            if getattr(conn, "_watched", False):
                conn._watched = False
                self.ran += 1
                if not self.lost:
                    self.lost = True
                    raise error(f"{command}: reply lost (test)")
            return response

        monkeypatch.setattr(Connection, "send_command", send_command)
        monkeypatch.setattr(Connection, "read_response", read_response)


def _sharded_purchase_runs_once(monkeypatch, error: type[Exception]) -> None:
    activity = make_activity(stock=20, shards=2)
    (shopper,) = make_users(1)
    lost = LostReply(monkeypatch, error, "EVALSHA", SHARD_PURCHASE.sha)

    with pytest.raises(error):
        reserve(activity, shopper.pk)

    assert lost.ran == 1, f"the shard purchase ran {lost.ran} times for one call"
    assert sum(s or 0 for s in shard_stocks(activity)) == 19


def _no_retries(retry) -> None:
    assert retry is not None, "no explicit retry policy"
    assert retry.get_retries() == 0


@pytest.mark.parametrize("error", LOST, ids=["connection-error", "timeout"])
def test_a_script_whose_reply_is_lost_runs_once(monkeypatch, error):
    _sharded_purchase_runs_once(monkeypatch, error)
    _no_retries(stock_redis().get_retry())  # and said so, not left to redis-py's defaults


@pytest.mark.slow
@pytest.mark.parametrize("error", LOST, ids=["connection-error", "timeout"])
def test_a_script_whose_reply_is_lost_runs_once_on_the_cluster(on_cluster, monkeypatch, error):
    client = stock_redis()
    assert isinstance(client, redis.RedisCluster)
    _sharded_purchase_runs_once(monkeypatch, error)
    _no_retries(client.retry)


@pytest.mark.parametrize("error", LOST, ids=["connection-error", "timeout"])
def test_a_cache_write_whose_reply_is_lost_runs_once(monkeypatch, error):
    cache.set("retry-probe", 1, timeout=60)
    LostReply(monkeypatch, error, "EVAL")

    cache.incr("retry-probe")  # IGNORE_EXCEPTIONS: the lost reply is a cache miss for the caller

    assert cache.get("retry-probe") == 2
    _no_retries(cache.client.get_client(write=True).get_retry())  # type: ignore[attr-defined]
