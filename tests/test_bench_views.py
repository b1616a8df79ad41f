"""The bench's database-direct purchase (bench/views.py): the contrast `make bench`
measures must be a working purchase, or its figures mean nothing."""

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from inventory.models import SeckillStock
from orders.models import Order
from seckill.sale.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from .factories import make_activity, make_users, token_of

pytestmark = [pytest.mark.django_db(transaction=True)]


@override_settings(ROOT_URLCONF="tests.bench_urls")
def test_database_direct_purchase_sells_the_stock_once_without_redis():
    activity = make_activity(stock=3, warm=False)
    users = make_users(5, prefix="naive")
    token = activity_token_ensure(activity_id=activity.pk)
    url = f"/api/bench/activities/{activity.pk}/purchase-db"

    def buy(user):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
        return client.post(url, {"token": token}, format="json")

    answers = [buy(user) for user in users]
    assert [a.status_code for a in answers] == [202, 202, 202, 410, 410]
    assert all(a.json()["code"] == "ordered" for a in answers[:3])
    assert buy(users[0]).json()["code"] == "duplicate"
    assert Order.objects.filter(activity=activity).count() == 3
    assert SeckillStock.objects.get(activity=activity).available == 0
    assert stock_redis().get(ActivityKeys(activity.pk).stock) is None  # never warmed, never touched


def test_the_bench_tells_a_lopsided_run_from_a_balanced_one():
    """The keep-alive imbalance: one gunicorn process did most of the work (bench/wrkrun.py)."""
    from bench.wrkrun import WrkResult

    def run(by_pid):
        return WrkResult(1000, 10.0, {}, {}, {}, 0.1, extra={"wall": 10.0, "server_cpu_by_pid": by_pid})

    assert run([8.5, 8.2, 0.1]).lopsided == ""  # both workers busy, the master idle
    assert run([9.0, 2.0, 0.1]).lopsided == "gunicorn processes at 0.90 and 0.20 cores"
    assert run([3.0, 0.5]).lopsided == ""  # a light run: under half a core, nothing to tell
    assert run([]).lopsided == ""


@pytest.mark.parametrize(
    "server", ["gunicorn sync ×2", "gunicorn gthread 2×16", "uvicorn-worker ×2, Django's ASGI handler"]
)
def test_the_yardstick_is_plain_django_on_the_standard_server_it_names(server, tmp_path, monkeypatch):
    """bench/yardstick.py: the plain project answers what the project's bare view answers, on
    the worker class named, with two workers whatever the environment asks of gunicorn (the
    project's gunicorn.conf.py and GUNICORN_* settings are not read)."""
    import http.client
    import json

    from bench.yardstick import PATH, plain_start

    monkeypatch.setenv("GUNICORN_CMD_ARGS", "--workers 3")
    monkeypatch.setenv("WEB_CONCURRENCY", "5")
    child, base = plain_start(server, tmp_path)
    try:
        conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=10)
        conn.request("GET", PATH)
        reply = conn.getresponse()
        assert (reply.status, json.loads(reply.read())) == (200, {"ok": True})
        software = "uvicorn" if "uvicorn" in server else "gunicorn"
        assert reply.getheader("server", "").lower().startswith(software)
        # sync workers close every connection; the other two keep it (gunicorn's defaults)
        assert (reply.getheader("connection", "").lower() == "close") == ("sync" in server)
        conn.close()
        assert len(child.pids()) == 3  # the master and two workers
    finally:
        child.stop()
    assert not child.alive()


def test_the_reference_tail_is_the_shortest_a_standard_server_gave_not_the_fastest_servers():
    """bench/yardstick.py: a pass whose fastest server (by req/s) has the longer tail does not
    lend that tail to the reference: the p99 target is against the best p99 a standard server
    gave in the pass (a run where gthread beat sync by 3% on req/s with 3x its p99 made every
    p99 ratio of the run look twice as good)."""
    from bench.yardstick import yardstick_reference

    def plain(rps, p99):
        return {"rps": rps, "p99_ms": p99, "socket_errors": 0, "unexpected": 0}

    before = {"sync": {50: plain(4614.0, 18.0)}, "gthread": {50: plain(4765.0, 54.0)}}
    after = {"sync": {50: plain(4192.0, 18.0)}, "gthread": {50: plain(2653.0, 62.0)}}
    ref = yardstick_reference([before, after])[50]
    assert ref["rps"] == (4765.0 + 4192.0) / 2
    assert ref["p99_ms"] == 18.0


def test_every_ratio_is_to_the_mean_of_the_yardstick_passes_best():
    """bench/report.py: the reference at a connection count is the mean of each pass's best
    req/s and of each pass's best p99; a row misses its target on req/s, p99, socket errors
    or an unexpected status."""
    from bench.report import scenario_rows

    def plain(rps, p99):
        return {"rps": rps, "p99_ms": p99, "socket_errors": 0, "unexpected": 0}

    payload = {
        "yardstick": {
            "before": {"sync": {"50": plain(2000.0, 20.0)}, "asgi": {"50": plain(500.0, 25.0)}},
            "after": {"sync": {"50": plain(1000.0, 40.0)}, "asgi": {"50": plain(1200.0, 60.0)}},
        },
        "results": [
            {"scenario": "sold out (410)", "connections": 50, "rps": 8000.0, "p99_ms": 30.0, "socket_errors": 0},
            {
                "scenario": "purchase (202), tokens in the shared cache",
                "connections": 50,
                "rps": 1000.0,
                "p99_ms": 60.0,
                "socket_errors": 2,
                "unexpected": 1,
            },
        ],
    }
    sold, buy = scenario_rows(payload)
    # reference: (2000 + 1200) / 2 = 1600 req/s; p99 (20 + 40) / 2 = 30 ms, each pass's lowest
    assert (sold["ratio"], sold["p99_ratio"], sold["misses"]) == (5.0, 1.0, [])
    assert (buy["ratio"], buy["p99_ratio"]) == (0.625, 2.0)
    assert buy["misses"] == ["req/s", "p99", "socket errors", "statuses"]


def test_the_purchases_p99_is_judged_on_their_rounds_beside_the_yardstick():
    """bench/report.py: a purchase measured in rounds (``--tail-rounds``) is judged on its
    p99 over the rounds against the passes of plain Django measured beside them (the mean of
    each), not on its first round against passes minutes away; its later rounds are not rows
    of their own; a scenario measured once is judged as before."""
    from bench.report import scenario_rows, tail_rounds

    def plain(rps, p99):
        return {"rps": rps, "p99_ms": p99, "socket_errors": 0, "unexpected": 0}

    def purchase(scenario, n, p99):
        return {
            "scenario": scenario,
            "connections": 50,
            "rps": 3000.0,
            "p99_ms": p99,
            "socket_errors": 0,
            "tail_round": n,
        }

    cached, cold = "purchase (202), tokens in the shared cache", "purchase (202), tokens not cached"
    payload = {
        "yardstick": {"before": {"sync": {"50": plain(3000.0, 10.0)}}, "after": {"sync": {"50": plain(3000.0, 10.0)}}},
        "tail_passes": {"50": [dict(plain(3000.0, p99), server="sync") for p99 in (16.0, 20.0, 24.0, 20.0)]},
        "results": [
            purchase(cached, 1, 16.0),  # 1.6x the passes before and after the scenarios: 1.2x beside it
            purchase(cold, 1, 14.0),  # 1.4x those passes, but 1.6x the rounds' own yardstick
            purchase(cached, 2, 28.0),
            purchase(cold, 2, 34.0),
            purchase(cached, 3, 28.0),
            purchase(cold, 3, 48.0),
            {"scenario": "sold out (410)", "connections": 50, "rps": 16000.0, "p99_ms": 16.0, "socket_errors": 0},
        ],
    }
    rounds = tail_rounds(payload)
    assert rounds[(cached, 50)]["p99s"] == [16.0, 28.0, 28.0]
    assert rounds[(cached, 50)]["ratio"] == 24.0 / 20.0
    assert rounds[(cold, 50)]["ratio"] == 32.0 / 20.0
    rows = {r["scenario"]: r for r in scenario_rows(payload)}
    assert len(scenario_rows(payload)) == 3  # one row per scenario: the first round's
    assert (rows[cached]["p99_ratio"], rows[cached]["p99_ratio_rounds"], rows[cached]["misses"]) == (1.6, 1.2, [])
    assert (rows[cold]["p99_ratio"], rows[cold]["p99_ratio_rounds"], rows[cold]["misses"]) == (1.4, 1.6, ["p99"])
    assert (rows["sold out (410)"]["p99_ratio_rounds"], rows["sold out (410)"]["misses"]) == (None, ["p99"])


def test_the_bench_rewrites_each_redis_append_only_file_once_before_it_measures(tmp_path, monkeypatch):
    """As OPERATIONS asks before a sale, after the token fill: the file at its smallest, so
    that no rewrite of Redis's own (a fork, and the dataset written again) starts during the
    runs. A Redis named twice (the stock and the cache URL) is rewritten once; the rewrite
    is over when the call returns. An embedded Redis of the test's own, in its folder."""
    import redis

    from bench.stack import redis_aof_compacted
    from devtools import embedded

    monkeypatch.setattr(embedded, "REDIS_DIR", tmp_path / "redis")
    monkeypatch.delenv("SECKILL_EMBEDDED_REDIS_PORT", raising=False)
    url = embedded.ensure_redis()
    client = redis.Redis.from_url(url)
    try:
        client.mset({f"shopper:{i}": "x" * 100 for i in range(2000)})
        before = client.info("persistence")
        assert before["aof_current_size"] > before["aof_base_size"]
        assert redis_aof_compacted([url, url]) == [url.split("//")[1].split("/")[0]]
        after = client.info("persistence")
        assert not after["aof_rewrite_in_progress"] and not after["aof_rewrite_scheduled"]
        assert after["aof_last_bgrewrite_status"] == "ok"
        assert after["aof_current_size"] == after["aof_base_size"]
    finally:
        client.close()
        assert embedded.stop_redis()


def test_plain_django_is_measured_behind_the_same_nginx_configuration_as_the_project(tmp_path):
    """bench/stack.py's front_start: deploy/nginx/shop.conf rendered by devtools/nginx.py in
    front of the yardstick's server. The answer is plain Django's, served by nginx; the sync
    workers close every connection, nginx keeps the client's open (and connects anew to
    gunicorn for the next request: the sync worker's own cost). Stopping it removes its prefix."""
    import http.client
    import json

    from bench.stack import front_start
    from bench.yardstick import PATH, plain_start

    child, base = plain_start("gunicorn sync ×2", tmp_path)
    front = None
    try:
        front = front_start(base.removeprefix("http://"), tmp_path, name="plain-nginx")
        conn = http.client.HTTPConnection(front.base.removeprefix("http://"), timeout=10)
        for _ in range(3):  # one connection for the three
            conn.request("GET", PATH)
            reply = conn.getresponse()
            assert (reply.status, json.loads(reply.read())) == (200, {"ok": True})
            assert reply.getheader("server") == "nginx"
            assert reply.getheader("connection", "").lower() != "close"
        conn.close()
        assert len(front.pids()) >= 2  # the master and its worker: the bench counts their CPU
    finally:
        if front is not None:
            front.stop()
        child.stop()
    assert not front.alive() and not front.front.prefix.exists()


def test_the_direct_runs_and_the_keepalive_refusals_have_tables_of_their_own():
    """bench/report.py: the main table is the project through nginx over plain Django through
    nginx; a run straight at gunicorn is judged in the direct table over plain Django straight
    at its server, and the keep-alive refusals on their answers and transport errors only."""
    from bench.report import cpu_table, direct_table, keepalive_rows, scenario_rows

    def plain(rps, p99, via):
        return {"rps": rps, "p99_ms": p99, "p50_ms": p99 / 2, "socket_errors": 0, "unexpected": 0, "via": via}

    def refusal(via, rps, **extra):
        return {
            "scenario": "sold out (410)",
            "connections": 50,
            "via": via,
            "rps": rps,
            "p50_ms": 1.0,
            "p99_ms": 10.0,
            "socket_errors": 0,
            "cpu_split_ms": {"nginx": 0.02, "web": 0.05, "worker": 0.0, "postgres": 0.0, "redis": 0.001},
            "system_cpu_ms_per_req": 0.071,
            **extra,
        }

    payload = {
        "yardstick": {"before": {"sync": {"50": plain(1000.0, 20.0, "nginx")}}},
        "yardstick_direct": {"sync": {"50": plain(2000.0, 15.0, "direct")}},
        "results": [
            refusal("nginx", 6000.0),
            refusal("direct", 8000.0),
            refusal("nginx", 3000.0, kind="keepalive", sent=100, answered=100, statuses={"410": 100}),
            refusal("direct", 3000.0, kind="keepalive", sent=100, answered=99, read_errors=1, socket_errors=1),
        ],
    }
    (row,) = scenario_rows(payload)
    assert (row["via"], row["ratio"], row["misses"]) == ("nginx", 6.0, [])
    direct = "\n".join(direct_table(payload))
    assert "| sold out (410) | 50 | 8,000 | 4.00 |" in direct  # over plain Django straight at sync
    kept = keepalive_rows(payload)
    assert [r["misses"] for r in kept] == [[], ["transport errors", "answers"]]
    cpu = "\n".join(cpu_table(payload))
    assert "| sold out (410) | nginx | 50 | 0.020 | 0.050 |" in cpu
