"""The purchase on the event loop (core.loop_bridge, stock.loop_redis, core.loop_database):
the same code as on a thread, its Redis commands pipelined on the loop's own connection and
answered in order, an error as redis-py raises it, a lost connection failing what waits on
it and no more; a new shopper's token read on the loop's own database connection, cancelled
at the web tier's deadline; and a purchase that can run there does, with the API chain's
answer."""

from __future__ import annotations

import asyncio
import contextvars
import json

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection

import server.app
from core.loop_bridge import await_only, on_loop, run_on_loop
from core.loop_database import loop_database
from orders.models import Order
from seckill.purchase.authentication import token_cache_clear, token_shopper
from seckill.purchase.shoppers import blacklist
from seckill.purchase.token_cache import token_shared_forget
from seckill.sale.activities import activity_token_ensure
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import PURCHASE

from ..factories import make_activity, make_users, token_of
from ..helpers import asgi_call, wait_until, wsgi_call

pytestmark = pytest.mark.django_db(transaction=True)

marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="-")


def test_a_function_on_the_loop_gets_its_awaits_results_its_errors_and_its_callers_context():
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n

    async def fail() -> None:
        raise ValueError("from the loop")

    def work(n: int) -> tuple:
        assert on_loop()
        try:
            await_only(fail())
        except ValueError as exc:
            caught = str(exc)
        return await_only(double(n)), caught, marker.get()

    async def main():
        marker.set("caller's")
        return await asyncio.gather(*(run_on_loop(work, n) for n in range(50)))

    assert asyncio.run(main()) == [(2 * n, "from the loop", "caller's") for n in range(50)]
    assert not on_loop()
    pending = double(1)
    with pytest.raises(RuntimeError):
        await_only(pending)
    pending.close()


def _on_loop(fn, *args):
    async def main():
        return await run_on_loop(fn, *args)

    return asyncio.run(main())


def test_commands_of_many_purchases_on_the_loop_each_get_their_own_reply():
    client = stock_redis()

    def one(n: int) -> tuple:
        client.set(f"loop-test:{n}", n)
        return int(client.get(f"loop-test:{n}")), client.incr(f"loop-test:{n}")

    async def main():
        return await asyncio.gather(*(run_on_loop(one, n) for n in range(200)))

    assert asyncio.run(main()) == [(n, n + 1) for n in range(200)]
    pipelined = _on_loop(lambda: client.pipeline(transaction=False).get("loop-test:7").incr("loop-test:8").execute())
    assert pipelined == [b"8", 10], "a pipeline's replies, parsed as on a thread"


def test_an_error_reply_is_raised_as_redis_py_raises_it_and_a_script_is_loaded_again():
    client = stock_redis()
    client.set("loop-test:text", "x")
    with pytest.raises(redis.ResponseError):
        _on_loop(lambda: client.incr("loop-test:text"))
    client.script_flush()
    activity = make_activity(stock=3)
    (user,) = make_users(1, prefix="noscript")
    keys = ActivityKeys(activity.pk)

    def buy():
        return PURCHASE(
            keys=[keys.stock, keys.users, keys.log, keys.failed, keys.drain, keys.reserve],
            args=[user.pk, 1, 1, 0, 2000],
            client=client,
        )

    code, remaining, *_ = _on_loop(buy)  # NOSCRIPT, then loaded and run
    assert (code, remaining) == (1, 2)


def test_a_lost_connection_fails_what_waits_on_it_and_the_next_command_connects_again():
    client = stock_redis()

    def lost_then_found() -> tuple:
        name = f"loop-victim-{id(client)}"
        client.execute_command("CLIENT", "SETNAME", name)
        victims = [c["id"] for c in stock_redis().client_list() if c.get("name") == name]
        try:
            # Killed from a connection of its own (a thread's: this one is the loop's).
            redis.Redis.from_url(settings.SECKILL_REDIS_URL).client_kill_filter(_id=victims[0])
            client.ping()
            first = "answered"
        except redis.ConnectionError:
            first = "lost"
        return first, client.ping()

    first, then = _on_loop(lost_then_found)
    assert first == "lost" and then is True


def test_a_new_shoppers_token_is_read_on_the_loops_connection_and_cancelled_at_the_deadline(settings):
    (user,) = make_users(1, prefix="loopdb")
    key = token_of(user)
    token_shared_forget([key])
    token_cache_clear()
    assert _on_loop(token_shopper, key).user_id == user.pk, "found on the loop's own connection"

    settings.WEB_STATEMENT_TIMEOUT = 0.5
    (other,) = make_users(1, prefix="loopdb-locked")
    other_key = token_of(other)
    token_shared_forget([other_key])
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    with psycopg.connect(**params) as locker:
        locker.execute("LOCK TABLE authtoken_token IN ACCESS EXCLUSIVE MODE")

        async def lookup():
            try:
                await run_on_loop(token_shopper, other_key)
            except OperationalError as exc:
                return str(exc)
            finally:
                await asyncio.sleep(0)

        refused = asyncio.run(lookup())
        assert refused, "the database did not answer in time: OperationalError (503 busy)"

        def lookups_running() -> int:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_stat_clear_snapshot()")
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query ILIKE %s"
                    " AND pid <> pg_backend_pid()",
                    ["%authtoken_token%"],
                )
                return cursor.fetchone()[0]

        wait_until(lambda: lookups_running() == 0, timeout=5, what="the cancelled statement gone")
        locker.rollback()
    assert loop_database  # one connection per loop, made on first use


def test_a_purchase_that_waits_only_on_redis_runs_on_the_loop_and_answers_as_the_api_chain(
    asgi_application, wsgi_application, monkeypatch, settings
):
    settings.SECKILL_ACTIVITY_CACHE_TTL = 1
    settings.SECKILL_BLACKLIST_CACHE_TTL = 1
    activity = make_activity(stock=3, per_user_limit=1)
    token = activity_token_ensure(activity_id=activity.pk)
    buyer, other = make_users(2, prefix="onloop")
    on_thread = []
    original = server.app._purchase_on_thread
    monkeypatch.setattr(server.app, "_purchase_on_thread", lambda *a: on_thread.append(a) or original(*a))
    activity_snapshot(activity.pk)
    blacklist()
    path = f"/api/activities/{activity.pk}/purchase"
    answer = asgi_call(
        asgi_application, "POST", path, headers={"Authorization": f"Token {token_of(buyer)}"}, body={"token": token}
    )
    assert answer["status"] == 202 and on_thread == [], "on the loop"
    for key, body in ((token_of(buyer), {"token": token}), (token_of(other), {"token": token, "quantity": 2})):
        served = asgi_call(asgi_application, "POST", path, headers={"Authorization": f"Token {key}"}, body=body)
        chain = wsgi_call(wsgi_application, "POST", path, headers={"Authorization": f"Token {key}"}, body=body)
        assert (served["status"], json.loads(served["body"])) == (chain["status"], json.loads(chain["body"]))
    assert on_thread == []
    reservations_drain(activity_id=activity.pk)
    assert Order.objects.filter(activity=activity, user=buyer).count() == 1


def test_a_redis_that_closes_every_connection_fails_the_waiting_commands_at_once():
    """While a connect has just failed, the commands waiting behind it fail without each
    trying again (50 waiting purchases once took 50 connects' time each, held on the loop)."""
    import socket
    import threading

    from stock.loop_redis import LoopRedis

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    accepted = []

    def refuse() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    port = listener.getsockname()[1]

    async def main():
        connection = LoopRedis(f"redis://127.0.0.1:{port}/3")
        return await asyncio.gather(*(connection.execute(("PING",)) for _ in range(50)), return_exceptions=True)

    try:
        results = asyncio.run(main())
    finally:
        listener.close()
    assert all(isinstance(r, redis.RedisError) for r in results), results
    assert len(accepted) <= 2, f"{len(accepted)} connects for 50 commands"
