"""Fault drills: real gunicorn, Celery worker and beat; the test breaks a real
dependency mid-sale (kills a redis-server, cuts the worker's database connection,
SIGKILLs the worker) and brings it back. Each ends with nothing lost, nothing doubled,
no shopper with two orders and the reconciliation identities holding."""

import json
import urllib.request
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token

from inventory.models import SeckillStock
from orders.models import Order
from seckill.sale.activities import activity_token_ensure
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining
from stock.redis_client import reset_stock_redis

from ..factories import make_activity, make_users
from ..helpers import free_port, start_celery_worker, start_gunicorn, subprocess_env, wait_until, waiting_on_a_lock
from .infra import (
    RedisServer,
    Supervisor,
    TcpProxy,
    assert_nothing_lost_nothing_doubled,
    crowd,
    purchase_answer,
    start_celery_beat,
    units_ordered,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST_BEAT = {"SECKILL_REPLAY_INTERVAL": "1", "SECKILL_AUTOWARM_INTERVAL": "2"}


@pytest.fixture
def stack(process_logs):
    """Starts processes on demand and stops every one of them at the end."""
    started = []

    class Stack:
        def web(self, env, workers=2):
            process, base = start_gunicorn(process_logs, workers=workers, threads=8, env=env)
            started.append(process)
            return base

        def worker(self, env, name="worker"):
            started.append(start_celery_worker(process_logs, env=env, name=name))
            return started[-1]

        def beat(self, env):
            started.append(start_celery_beat(process_logs, env=env))
            return started[-1]

        def keep(self, thing):
            started.append(thing)
            return thing

    yield Stack()
    for thing in reversed(started):
        thing.stop()


def _sale(stock: int, shoppers: int, reserve: int = 0):
    activity = make_activity(stock=stock, db_reserve=reserve)
    users = make_users(shoppers)
    keys = dict(Token.objects.filter(user__in=users).values_list("user_id", "key"))
    return activity, users, keys, activity_token_ensure(activity_id=activity.pk)


def _crowds_around_a_fault(base, activity, users, keys, token, *, fault, repair, what: str) -> dict:
    """Ten shoppers buy before the fault, fifteen while it lasts (each one queued: the
    reservation log holds them), the rest once it is repaired and the orders made during
    it have appeared. Returns every shopper's (status, code)."""
    answers = crowd(base, activity.pk, token, users[:10], keys)
    wait_until(lambda: units_ordered(activity) == 10, timeout=120, what="orders before the fault")
    fault()
    during = crowd(base, activity.pk, token, users[10:25], keys)
    assert set(during.values()) == {(202, "queued")}, during
    repair()
    wait_until(lambda: units_ordered(activity) == 25, timeout=120, what=f"the orders once {what} is back")
    return answers | during | crowd(base, activity.pk, token, users[25:], keys)


def test_broker_down_purchases_succeed_and_orders_appear_when_it_returns(stack, process_logs):
    broker = stack.keep(RedisServer(free_port(), process_logs, name="broker").start())
    env = subprocess_env(CELERY_BROKER_URL=broker.url, **FAST_BEAT)
    base = stack.web(env)
    # kombu's Redis transport can die when the broker connection drops ("Unrecoverable
    # error: AttributeError … 'hostname'", a known kombu bug): a worker runs under a
    # supervisor in production (systemd Restart=always, Kubernetes), and here.
    stack.keep(Supervisor(start_celery_worker(process_logs, env=env)))
    stack.beat(env)
    activity, users, keys, token = _sale(stock=30, shoppers=60)

    answers = _crowds_around_a_fault(
        base, activity, users, keys, token, fault=broker.kill, repair=broker.start, what="the broker"
    )
    assert sum(1 for s, _ in answers.values() if s == 202) == 30
    assert {c for s, c in answers.values() if s != 202} == {"sold_out"}
    assert_nothing_lost_nothing_doubled(activity, answers)


def test_database_down_for_the_worker_orders_appear_when_it_returns(stack, process_logs):
    proxy = stack.keep(TcpProxy(int(connection.settings_dict["PORT"]), free_port()).start())
    db = connection.settings_dict
    worker_env = subprocess_env(
        DATABASE_URL=f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}", **FAST_BEAT
    )
    base = stack.web(subprocess_env())
    stack.worker(worker_env)
    stack.beat(worker_env)
    activity, users, keys, token = _sale(stock=30, shoppers=60)

    answers = _crowds_around_a_fault(
        base, activity, users, keys, token, fault=proxy.cut, repair=proxy.restore, what="the database"
    )
    assert sum(1 for s, _ in answers.values() if s == 202) == 30
    assert_nothing_lost_nothing_doubled(activity, answers)


def test_worker_killed_mid_batch_every_order_exactly_once(stack, process_logs):
    # One order per transaction. The test holds the stock row while the second half
    # buys, so the kill lands inside a batch's transaction (order inserted, guard
    # waiting) however fast the drain is, with the first half already ordered.
    env = subprocess_env(SECKILL_ORDER_BATCH_SIZE="1", **FAST_BEAT)
    base = stack.web(env)
    activity, users, keys, token = _sale(stock=300, shoppers=300)
    worker = stack.worker(env, name="doomed-worker")
    stack.beat(env)
    answers = crowd(base, activity.pk, token, users[:150], keys)
    wait_until(lambda: units_ordered(activity) == 150, timeout=120, what="the first half's orders")

    with transaction.atomic():
        SeckillStock.objects.select_for_update().get(activity=activity)
        answers |= crowd(base, activity.pk, token, users[150:], keys)
        wait_until(lambda: waiting_on_a_lock() >= 1, timeout=120, what="the worker to block on the stock row")
        worker.kill()
        assert not worker.alive()
    assert sum(1 for s, _ in answers.values() if s == 202) == 300
    assert units_ordered(activity) == 150, "the crash left the second half undone"

    stack.worker(env, name="second-worker")
    assert_nothing_lost_nothing_doubled(activity, answers)


def test_redis_restarted_empty_never_sold_out_and_rewarm_derives_stock(stack, process_logs, settings):
    stock_server = stack.keep(RedisServer(free_port(), process_logs, name="stock-redis").start())
    env = subprocess_env(REDIS_URL=stock_server.url, CELERY_BROKER_URL=settings.CELERY_BROKER_URL, **FAST_BEAT)
    # This process reads the same Redis as the web and worker processes.
    db_url = f"redis://127.0.0.1:{stock_server.port}/{settings.SECKILL_TEST_REDIS_DB}"
    settings.SECKILL_REDIS_URL = db_url
    reset_stock_redis()
    try:
        base = stack.web(env)
        stack.worker(env)
        activity, users, keys, token = _sale(stock=30, shoppers=60)
        answers = crowd(base, activity.pk, token, users[:10], keys)
        wait_until(lambda: units_ordered(activity) == 10, timeout=120, what="orders before the fault")
        wait_until(lambda: redis.Redis.from_url(db_url).xlen(f"seckill:{{a{activity.pk}}}:log") == 0, timeout=60)

        stock_server.kill()
        stock_server.start()  # empty: no stock key, no participants, no log
        reset_stock_redis()
        assert redis_remaining(activity.pk) is None
        while_cold = crowd(base, activity.pk, token, users[10:20], keys)
        assert {a for a in while_cold.values()} == {(503, "busy")}, while_cold

        stack.beat(env)  # the automatic re-warm
        assert wait_until(lambda: redis_remaining(activity.pk) == 20, timeout=120, what="the re-warm")
        again = crowd(base, activity.pk, token, users[:10], keys)
        assert {a for a in again.values()} == {(409, "duplicate")}, "participants were not restored"
        rest = crowd(base, activity.pk, token, users[10:], keys)
        answers |= rest
        assert sum(1 for s, _ in answers.values() if s == 202) == 30
        assert {c for s, c in rest.values() if s != 202} == {"sold_out"}
        assert_nothing_lost_nothing_doubled(activity, answers)
        assert Order.objects.filter(activity=activity).count() == 30
    finally:
        reset_stock_redis()  # pytest-django's settings fixture restores the URL


def test_redis_down_the_database_path_sells_the_reserve_and_redis_its_share_after(stack, process_logs, settings):
    # Web and worker reach Redis through a proxy the test cuts: Redis keeps its data
    # (a network failure, not a restart). The database path sells the reserve (20 of 40),
    # which Redis never held, so Redis's stock is right when it comes back.
    proxy = stack.keep(TcpProxy(urlsplit(settings.REDIS_URL).port, free_port()).start())
    env = subprocess_env(
        REDIS_URL=f"redis://127.0.0.1:{proxy.port}/0",
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        SECKILL_BREAKER_FAILURES="1",
        SECKILL_BREAKER_RESET="1",
        SECKILL_FALLBACK_CONCURRENCY="2",
        **FAST_BEAT,
    )
    base = stack.web(env, workers=1)  # one breaker, so the drill is deterministic
    stack.worker(env)
    stack.beat(env)
    activity, users, keys, token = _sale(stock=40, shoppers=100, reserve=20)

    def until_answered(answers):
        answers = dict(answers)
        for user_id, answer in answers.items():
            while answer == (503, "busy"):  # the shopper clicks again
                answer = answers[user_id] = purchase_answer(base, activity.pk, keys[user_id], token)
        return answers

    answers = crowd(base, activity.pk, token, users[:10], keys)
    wait_until(lambda: units_ordered(activity) == 10, timeout=120, what="orders before the fault")
    wait_until(lambda: reconcile(activity_id=activity.pk)["reserved_not_ordered"] == 0, timeout=60)

    proxy.cut()
    first_try = crowd(base, activity.pk, token, users[10:30], keys)
    assert set(first_try.values()) <= {(202, "queued"), (503, "busy")}, first_try
    assert (503, "busy") in first_try.values(), "the cap (2) never said busy to 20 concurrent shoppers"
    during = until_answered(first_try)
    assert set(during.values()) == {(202, "queued")}
    assert units_ordered(activity) == 30, "the database path writes the order at once"
    assert purchase_answer(base, activity.pk, keys[users[0].pk], token) == (409, "duplicate")
    answers |= during
    with urllib.request.urlopen(_operator_request(f"{base}/metrics"), timeout=30) as response:
        metrics = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.read().decode())
            for s in family.samples
        }
    assert metrics[("seckill_redis_breaker_state", ())] == 2  # open
    assert metrics[("seckill_fallback_purchase_total", (("code", "queued"),))] == 20
    assert metrics[("seckill_fallback_purchase_total", (("code", "busy"),))] >= 1
    health = _operator_request(f"{base}/healthz")
    try:
        urllib.request.urlopen(health, timeout=30)
        raise AssertionError("/healthz said ok with Redis cut")
    except urllib.error.HTTPError as exc:
        assert exc.code == 503
        assert json.loads(exc.read())["redis"]["breaker"] == "open"

    proxy.restore()
    rest = until_answered(crowd(base, activity.pk, token, users[30:], keys))
    answers |= rest
    assert sum(1 for s, _ in answers.values() if s == 202) == 40
    assert {c for s, c in rest.values() if s != 202} == {"sold_out"}
    assert_nothing_lost_nothing_doubled(activity, answers)
    assert redis_remaining(activity.pk) == 0
    assert Order.objects.filter(activity=activity, reservation_id__startswith="db-").count() == 20, "the reserve"
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["db_reserve_left"] == 0, report


def _operator_request(url: str) -> urllib.request.Request:
    """/metrics and the details of /healthz are for the operator's bearer token."""
    return urllib.request.Request(url, headers={"Authorization": f"Bearer {settings.METRICS_TOKEN}"})


def _web_metrics(base: str) -> dict:
    with urllib.request.urlopen(_operator_request(f"{base}/metrics"), timeout=30) as response:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.read().decode())
            for s in family.samples
        }


def _breaker_state(base: str) -> str:
    try:
        with urllib.request.urlopen(_operator_request(f"{base}/healthz"), timeout=30) as response:
            return json.loads(response.read())["redis"]["breaker"]
    except urllib.error.HTTPError as exc:  # 503 while a dependency is down; the body says which
        return json.loads(exc.read())["redis"]["breaker"]


def test_redis_back_for_one_server_while_the_other_sells_its_reserve_no_unit_is_promised_twice(
    stack, process_logs, settings
):
    """Two web servers, each reaching Redis through a proxy of its own: both lose Redis
    and sell from the database; Redis returns; server A's probe closes its breaker and A
    sells from Redis. Server B's breaker is still open (its reset time is an hour, and no
    beat runs here), so B goes on selling from the database — only the reserve, which
    Redis never holds. Every 202 of either server becomes an order, and when the reserve
    is gone B answers busy, never a unit Redis also offers."""
    proxies = [stack.keep(TcpProxy(urlsplit(settings.REDIS_URL).port, free_port()).start()) for _ in "ab"]

    def env(proxy, reset: str) -> dict:
        return subprocess_env(
            REDIS_URL=f"redis://127.0.0.1:{proxy.port}/0",
            CELERY_BROKER_URL=settings.CELERY_BROKER_URL,  # the broker is not behind the proxy
            SECKILL_BREAKER_FAILURES="1",
            SECKILL_BREAKER_RESET=reset,
        )

    a = stack.web(env(proxies[0], "0.5"), workers=1)
    b = stack.web(env(proxies[1], "3600"), workers=1)  # one process each: one breaker each
    stack.worker(subprocess_env(CELERY_BROKER_URL=settings.CELERY_BROKER_URL))
    activity, users, keys, token = _sale(stock=20, shoppers=40, reserve=8)
    db_path = Order.objects.filter(activity=activity, reservation_id__startswith="db-")
    shoppers = iter(users)
    answers = {}

    def buy(base: str):
        user = next(shoppers)
        answers[user.pk] = purchase_answer(base, activity.pk, keys[user.pk], token)
        return user, answers[user.pk]

    assert buy(a)[1] == buy(b)[1] == (202, "queued")  # through Redis
    wait_until(lambda: units_ordered(activity) == 2, timeout=120, what="orders before the fault")

    for proxy in proxies:
        proxy.cut()
    for base in (a, a, a, b, b, b):
        assert buy(base)[1] == (202, "queued")
    assert db_path.count() == 6 and _breaker_state(a) == _breaker_state(b) == "open"
    for proxy in proxies:
        proxy.restore()

    # A's reset time passes; its next purchase is the probe, through Redis. Until then A
    # sells from the reserve, and once that is gone answers busy: no order, but no probe.
    def bought_through_redis() -> bool:
        user, answer = buy(a)
        return answer == (202, "queued") and not db_path.filter(user=user).exists()

    wait_until(bought_through_redis, timeout=60, interval=0.2, what="A's probe to buy via Redis")
    assert _breaker_state(a) == "closed" and _breaker_state(b) == "open"
    # (A's purchases before its probe may have sold some of the reserve too.)
    left = SeckillStock.objects.get(activity=activity).reserve
    b_answers = [buy(b)[1] for _ in range(left + 2)]
    assert b_answers == [(202, "queued")] * left + [(503, "busy")] * 2, b_answers
    assert db_path.count() == 8, "B sold the rest of the reserve, and nothing more"
    answer = buy(a)[1]
    while answer == (202, "queued"):  # A sells Redis's share to the end
        answer = buy(a)[1]
    assert answer == (410, "sold_out")

    queued = sum(1 for s, _ in answers.values() if s == 202)
    assert queued == 20, answers
    wait_until(lambda: units_ordered(activity) == 20, timeout=120, what="every 202 to become an order")
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["units_reserve_live"] == 8, report
    assert_nothing_lost_nothing_doubled(activity, {u: a for u, a in answers.items() if a != (503, "busy")})
    stock = SeckillStock.objects.get(activity=activity)
    assert (stock.available, stock.reserve) == (0, 0) and redis_remaining(activity.pk) == 0
