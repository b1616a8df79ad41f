"""The server's front runs a token purchase on its event loop when it needs only memory, two
short Redis round trips and, for a new shopper, the loop's batched token lookup
(seckill.gates.purchase_runs_inline), and on the thread pool otherwise. Either way the
answer is the full path's, every 202 becomes an order, and a purchase is counted against
the limits once."""

import asyncio
import concurrent.futures
import contextlib
import gc
import json
import socket
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from config.asgi import application as front
from core.loop_database import loop_database_reset
from orders.models import Order
from seckill.activities import activity_token_ensure
from seckill.authentication import token_cache_clear, token_shared_remember
from seckill.breaker import redis_breaker
from seckill.models import Activity
from seckill.replay import reservations_drain
from seckill.selectors import (
    activity_snapshot,
    activity_snapshot_forget,
    activity_snapshot_renewal_due,
    blacklist,
    blacklist_renewal_due,
)

from ..factories import make_activity, make_users, token_of
from ..helpers import (
    asgi_call,
    asgi_request,
    assert_identity,
    batch_sizes,
    purchase,
    start_celery_worker,
    start_gunicorn,
    subprocess_env,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

full_path = front.app


class CountingPool(concurrent.futures.Executor):
    """The front's thread pool, counting the purchases it runs."""

    def __init__(self, inner):
        self.inner, self.views, self.calls = inner, 0, Counter()

    def submit(self, fn, /, *args, **kwargs):
        name = getattr(fn, "__name__", "")
        self.calls[name] += 1
        self.views += name == "_view_call"
        return self.inner.submit(fn, *args, **kwargs)


@pytest.fixture(autouse=True)
def pool():
    inner = front.executor
    front.executor = counting = CountingPool(inner)
    yield counting
    front.executor = inner


@pytest.fixture
def lookups(monkeypatch) -> list[int]:
    """The number of tokens of each statement the loop's token lookup sends, in order."""
    from core.loop_database import loop_database

    sizes: list[int] = []
    fetch_all = loop_database.fetch_all

    async def counted(sql, params):
        sizes.append(len(params[0]))
        return await fetch_all(sql, params)

    monkeypatch.setattr(loop_database, "fetch_all", counted)
    return sizes


@pytest.fixture(autouse=True)
def remembering(settings):
    """The production memories (the test settings keep none): what lets a purchase run inline."""
    settings.SECKILL_ACTIVITY_CACHE_TTL = 30
    settings.SECKILL_BLACKLIST_CACHE_TTL = 30
    settings.SECKILL_SOLD_OUT_TTL = 30
    settings.SECKILL_DUPLICATE_TTL = 30


def _buy(app, activity, user) -> dict:
    answer = asgi_call(
        app,
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": f"Token {token_of(user)}"},
        body={"token": activity_token_ensure(activity_id=activity.pk), "quantity": 1},
    )
    answer["json"] = json.loads(answer["body"])
    return answer


async def _purchases(activity, shoppers: list[str], token: str) -> list[dict]:
    """Each shopper's purchase at once, on the running event loop, as on the server."""
    return await asyncio.gather(
        *(
            asgi_request(
                front,
                "POST",
                f"/api/activities/{activity.pk}/purchase",
                headers={"Authorization": f"Token {shopper}"},
                body={"token": token, "quantity": 1},
            )
            for shopper in shoppers
        )
    )


def _buy_together(activity, shoppers: list[str], token: str) -> list[dict]:
    """``_purchases`` on an event loop of their own."""
    return asyncio.run(_purchases(activity, shoppers, token))


def _cached(*users) -> None:
    token_shared_remember([(token_of(u), u.pk, u.username) for u in users])


def _remembered(activity) -> None:
    activity_snapshot(activity.pk)
    blacklist()


def test_a_shopper_in_the_shared_cache_buys_on_the_event_loop_and_gets_an_order(pool):
    activity = make_activity(stock=5)
    users = make_users(2, prefix="inline")
    _cached(*users)
    _remembered(activity)
    inline = _buy(front, activity, users[0])
    assert inline["status"] == 202 and inline["json"]["code"] == "queued"
    assert pool.views == 0, "answered on the event loop"
    full = _buy(full_path, activity, users[1])
    assert full["status"] == 202
    assert set(inline["json"]) == set(full["json"])
    assert inline["headers"]["content-type"] == full["headers"]["content-type"]
    reservations_drain(activity_id=activity.pk)
    assert set(Order.objects.filter(activity=activity).values_list("user_id", flat=True)) == {u.pk for u in users}
    assert _buy(front, activity, users[0])["json"]["code"] == "duplicate"
    assert_identity(activity)


def test_a_sales_first_requests_fill_the_memory_once_and_all_buy_on_the_event_loop(pool):
    """At a sale's start every request finds the activity and the blacklist missing from
    this process's memory: they wait on one lookup of each, not one hop to the pool each
    (which took the GIL from the loop: the first request of each new connection waited
    seconds to be read at 200 connections)."""
    activity = make_activity(stock=40)
    users = make_users(30, prefix="firstsecond")
    _cached(*users)
    activity_snapshot_forget()
    token = activity_token_ensure(activity_id=activity.pk)
    shoppers = [token_of(user) for user in users]
    activity_snapshot_forget()

    answers = _buy_together(activity, shoppers, token)
    assert [a["status"] for a in answers] == [202] * len(users), [a["body"] for a in answers]
    assert pool.calls["activity_snapshot"] == 1, pool.calls
    assert pool.calls["blacklist"] == 1, pool.calls
    assert pool.views == 0, "every purchase ran on the event loop"
    reservations_drain(activity_id=activity.pk)
    assert Order.objects.filter(activity=activity).count() == len(users)
    assert_identity(activity)


def test_copies_near_their_end_are_renewed_ahead_and_no_purchase_waits_for_them(pool, settings):
    """The activity's and the blacklist's copies ran out every second or two, and each
    time the purchases that found them missing waited for the pool to fill them again
    (behind the GIL the pool's thread held). A copy in the last part of its life is now
    renewed on the pool while it still serves: purchases go on with it."""
    activity = make_activity(stock=10)
    users = make_users(4, prefix="renewed")
    _cached(*users)
    token = activity_token_ensure(activity_id=activity.pk)
    activity_snapshot_forget()
    # Copies with 2 s left of a 30 s life: in their last quarter.
    settings.SECKILL_ACTIVITY_CACHE_TTL = settings.SECKILL_BLACKLIST_CACHE_TTL = 2
    _remembered(activity)
    settings.SECKILL_ACTIVITY_CACHE_TTL = settings.SECKILL_BLACKLIST_CACHE_TTL = 30
    assert activity_snapshot_renewal_due(activity.pk) and blacklist_renewal_due()

    shoppers = [token_of(user) for user in users]

    async def buy_then_let_the_renewals_end():
        first = await _purchases(activity, shoppers[:1], token)
        renewals = [front.fills[name] for name in (f"activity:{activity.pk}", "blacklist") if name in front.fills]
        await asyncio.wait_for(asyncio.gather(*(asyncio.shield(r) for r in renewals)), timeout=30)
        return first + await _purchases(activity, shoppers[1:], token)

    answers = asyncio.run(buy_then_let_the_renewals_end())
    assert [a["status"] for a in answers] == [202] * len(users), [a["body"] for a in answers]
    assert pool.calls["activity_snapshot_renew"] == 1 and pool.calls["blacklist_renew"] == 1, pool.calls
    assert pool.calls["activity_snapshot"] == 0 and pool.calls["blacklist"] == 0, "a purchase waited for a fill"
    assert pool.views == 0, "every purchase ran on the event loop"
    assert not activity_snapshot_renewal_due(activity.pk) and not blacklist_renewal_due(), "renewed for 30 s"
    reservations_drain(activity_id=activity.pk)
    assert Order.objects.filter(activity=activity).count() == len(users)
    assert_identity(activity)


def test_purchases_answered_together_on_the_loop_share_their_redis_round_trips(pool, monkeypatch, settings):
    """The loop waits on Redis once per step for all the purchases of a loop turn
    (stock.batching): the shopper gates in one pipeline, the stock scripts in the next,
    not two round trips per purchase with every other request held meanwhile. Each still
    gets its own answer: the stock sold exactly once, each 202 its order."""
    stock = 25
    activity = make_activity(stock=stock)
    users = make_users(40, prefix="together")
    _cached(*users)
    _remembered(activity)
    token = activity_token_ensure(activity_id=activity.pk)
    sizes = batch_sizes(monkeypatch)
    answers = _buy_together(activity, [token_of(user) for user in users], token)
    statuses = Counter(a["status"] for a in answers)
    assert statuses == {202: stock, 410: len(users) - stock}, [a["body"] for a in answers]
    assert pool.views == 0, "every purchase ran on the event loop"
    assert max(sizes) == len(users), f"every shopper's gate in one pipeline: {sizes}"
    if not settings.SECKILL_REDIS_CLUSTER:  # a Cluster's stock scripts go as they are
        assert sum(sizes) >= 2 * len(users), "the gate and the stock script of each purchase went in pipelines"
    reservations_drain(activity_id=activity.pk)
    winners = {u.pk for u, a in zip(users, answers, strict=True) if a["status"] == 202}
    assert set(Order.objects.filter(activity=activity).values_list("user_id", flat=True)) == winners
    assert_identity(activity)


def test_a_token_only_the_database_knows_is_looked_up_on_the_loop_and_counted_once(pool, lookups):
    """A new shopper the shared cache does not hold waits on the loop for its token's
    lookup, then buys: no hop to a thread (each was one, and the purchase ran twice on the
    loop, the hop and the second run costing as much as the purchase)."""
    activity = make_activity(stock=5)
    Activity.objects.filter(pk=activity.pk).update(rate_per_user="1/m")
    activity_snapshot_forget(activity.pk)
    (user,) = make_users(1, prefix="inlinedb")
    _remembered(activity)
    answer = _buy(front, activity, user)
    # Counted twice, the one request allowed a minute would be over its limit: 429.
    assert answer["status"] == 202, answer["json"]
    assert pool.views == 0 and pool.calls["_fetch_call"] == 0, f"no hop to a thread: {pool.calls}"
    assert lookups == [1], "the token looked up on the loop's connection"
    reservations_drain(activity_id=activity.pk)
    assert list(Order.objects.filter(activity=activity).values_list("user_id", flat=True)) == [user.pk]
    again = _buy(front, activity, user)
    assert lookups == [1] and pool.views == 0, "the token is remembered now"
    assert again["status"] in (409, 429)


def test_new_shoppers_arriving_together_are_looked_up_in_one_statement(pool, lookups):
    """A flood of shoppers the shared cache does not hold: the tokens of the purchases that
    reach the lookup in one turn of the loop go in one statement (and one write to the
    shared cache), not one each; the first no longer goes alone. Every one buys on the
    loop, its 202 becomes its order, and the next process finds it in the shared cache."""
    activity = make_activity(stock=40)
    users = make_users(30, prefix="batchdb")
    _remembered(activity)
    token = activity_token_ensure(activity_id=activity.pk)
    shoppers = [token_of(user) for user in users]

    answers = _buy_together(activity, shoppers, token)
    assert [a["status"] for a in answers] == [202] * len(users), [a["body"] for a in answers]
    assert lookups == [30], "every token in one statement"
    assert pool.views == 0 and pool.calls["_fetch_call"] == 0, f"every purchase ran on the event loop: {pool.calls}"
    reservations_drain(activity_id=activity.pk)
    assert set(Order.objects.filter(activity=activity).values_list("user_id", flat=True)) == {u.pk for u in users}
    assert_identity(activity)
    token_cache_clear()  # this process forgets them: the shared cache still knows them
    again = _buy(front, activity, users[0])
    assert again["json"]["code"] == "duplicate"
    assert lookups == [30], "found in the shared cache"


def test_new_shoppers_bought_on_the_loop_leave_no_garbage_cycles(pool, lookups):
    """Each new shopper's purchase on the loop waits for its token's lookup; nothing of
    that wait may keep frames alive in a cycle. An earlier design's error per new shopper
    did: 49 objects per shopper, thousands a second in a flood, for every full collection
    to find while every request on the loop waited (the purchases' p99)."""
    activity = make_activity(stock=120)
    users = make_users(110, prefix="nocycle")
    _remembered(activity)
    token = activity_token_ensure(activity_id=activity.pk)
    shoppers = [token_of(user) for user in users]

    async def buy(batch: list[str]) -> list[int]:
        return [answer["status"] for answer in await _purchases(activity, batch, token)]

    async def flood() -> int:
        assert await buy(shoppers[:10]) == [202] * 10  # warm: connections, statements
        gc.collect()
        gc.disable()
        try:
            assert await buy(shoppers[10:]) == [202] * 100
            return gc.collect()
        finally:
            gc.enable()

    found = asyncio.run(flood())
    assert len(lookups) >= 2 and pool.views == 0, "looked up and bought on the loop"
    assert found < 500, f"{found} objects in garbage cycles after 100 new shoppers"  # was 4,948
    reservations_drain(activity_id=activity.pk)
    assert_identity(activity)


def test_a_new_shopper_with_the_database_away_is_answered_busy_and_counted_nowhere(pool, lookups):
    """The loop's lookup meets a database that is away: 503 busy, as the full path answers
    a query that fails, and nothing was counted (the gate looked the token up only), so the
    shopper's one request a minute is still theirs once the database is back."""
    activity = make_activity(stock=5)
    Activity.objects.filter(pk=activity.pk).update(rate_per_user="1/m")
    activity_snapshot_forget(activity.pk)
    (user,) = make_users(1, prefix="dbaway")
    _remembered(activity)
    with _database_away():
        answer = _buy(front, activity, user)
    assert answer["status"] == 503 and answer["json"]["code"] == "busy", answer["json"]
    assert answer["headers"]["retry-after"] == ["2"]
    assert pool.views == 0, "answered on the loop"
    loop_database_reset()  # as its retry time ends
    again = _buy(front, activity, user)
    assert again["status"] == 202, again["json"]
    reservations_drain(activity_id=activity.pk)
    assert_identity(activity)


@contextlib.contextmanager
def _database_away():
    """Django's settings of the database point at a port nothing listens on: what a new
    connection meets when the database is down (the connections already made are left)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings_dict = connections["default"].settings_dict
    real = settings_dict["PORT"], settings_dict["HOST"]
    settings_dict["PORT"], settings_dict["HOST"] = port, "127.0.0.1"
    loop_database_reset()  # its connection made anew, to the port of no one
    try:
        yield
    finally:
        settings_dict["PORT"], settings_dict["HOST"] = real


def test_a_token_nobody_has_is_answered_by_the_full_path(pool):
    activity = make_activity(stock=5)
    _remembered(activity)

    def buy(app) -> dict:
        return asgi_call(
            app,
            "POST",
            f"/api/activities/{activity.pk}/purchase",
            headers={"Authorization": "Token " + "0" * 40},
            body={"token": activity_token_ensure(activity_id=activity.pk), "quantity": 1},
        )

    answer, full = buy(front), buy(full_path)
    assert answer["status"] == full["status"] == 401
    assert json.loads(answer["body"]) == json.loads(full["body"])


@pytest.mark.parametrize("why", ["redis_erred", "eligibility", "no_blacklist_memory"])
def test_what_may_wait_runs_on_the_pool_with_the_full_paths_answer(pool, why, settings):
    activity = make_activity(stock=5)
    if why == "eligibility":
        Activity.objects.filter(pk=activity.pk).update(min_account_age_days=1)
    users = make_users(2, prefix=f"pool{why[:8]}")
    _cached(*users)
    activity_snapshot_forget(activity.pk)
    activity_snapshot(activity.pk)
    if why == "no_blacklist_memory":  # a copy that ran out is filled first (the test above)
        settings.SECKILL_BLACKLIST_CACHE_TTL = 0
    blacklist()
    if why == "redis_erred":
        redis_breaker().error_note()
    answer = _buy(front, activity, users[0])
    assert pool.views == 1, "run on the pool"
    full = _buy(full_path, activity, users[1])
    assert answer["status"] == full["status"]
    assert answer["json"].get("code") == full["json"].get("code")
    assert answer["status"] == (403 if why == "eligibility" else 202)


def test_a_flood_through_the_real_server_keeps_every_202(process_logs):
    """The real server with the production memories and a real Celery worker: the drain
    requests a purchase on the loop makes reach the worker, every 202 becomes an order and
    no unit is sold twice."""
    stock, shoppers = 60, 150
    activity = make_activity(stock=stock)
    users = make_users(shoppers, prefix="inlineflood")
    _cached(*users[: shoppers // 2])  # half in the shared cache, half only in the database
    env = subprocess_env(
        SECKILL_ACTIVITY_CACHE_TTL="1",
        SECKILL_BLACKLIST_CACHE_TTL="1",
        SECKILL_SOLD_OUT_TTL="1",
        SECKILL_DUPLICATE_TTL="1",
    )
    worker = start_celery_worker(process_logs, env=env)
    server, base = start_gunicorn(process_logs, workers=2, threads=4, env=env)
    try:
        keys = [token_of(u) for u in users]
        with ThreadPoolExecutor(max_workers=24) as threads:
            token = activity_token_ensure(activity_id=activity.pk)
            answers = list(threads.map(lambda key: purchase(base, activity.pk, key, token), keys))
        statuses = [status for status, _body, _headers in answers]
        assert statuses.count(202) == stock, statuses
        assert set(statuses) <= {202, 410}, statuses
        wait_until(
            lambda: Order.objects.filter(activity=activity).count() == stock,
            timeout=90,
            what="every 202's order, drained by the worker",
        )
        winners = {u.pk for u, (status, _b, _h) in zip(users, answers, strict=True) if status == 202}
        assert set(Order.objects.filter(activity=activity).values_list("user_id", flat=True)) == winners
        assert_identity(activity)
    finally:
        server.stop()
        worker.stop()
