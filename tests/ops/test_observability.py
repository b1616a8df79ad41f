"""/healthz, /metrics (multiprocess mode across real gunicorn workers) and request ids
in the structured logs."""

import json
import urllib.request
from email.message import Message

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import REGISTRY

from seckill.sale.activities import activity_token_ensure
from seckill.sale.reconciliation import reconcile
from stock.redis_client import reset_stock_redis

from ..factories import make_activity, make_users, token_of
from ..helpers import free_port, start_gunicorn, subprocess_env, wait_until


def _request(url: str, *, body: dict | None = None, headers: dict | None = None) -> tuple[int, Message, bytes]:
    """Status, headers (case-insensitive, as HTTP's are: uvicorn sends them in lower case)
    and body."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def _samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def operator(settings) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {settings.METRICS_TOKEN}"}


@pytest.mark.django_db
def test_healthz_tells_the_public_only_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"].startswith("no-store")


@pytest.mark.django_db
def test_healthz_reports_each_dependency_to_the_operator(client, settings):
    response = client.get("/healthz", **operator(settings))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert {body[k]["status"] for k in ("database", "redis", "broker")} == {"ok"}
    assert body["redis"]["breaker"] == "closed"
    assert response["Cache-Control"].startswith("no-store")


@pytest.mark.django_db
def test_healthz_503_when_redis_is_unreachable(client, settings):
    # A real refused connection: nothing listens on this port.
    with override_settings(SECKILL_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        reset_stock_redis()
        public = client.get("/healthz")
        response = client.get("/healthz", **operator(settings))
    reset_stock_redis()
    assert (public.status_code, public.json()) == (503, {"status": "degraded"})
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["redis"]["status"] == "down" and "Error" in body["redis"]["error"]
    assert body["database"]["status"] == "ok"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", "Bearer wrong", "Token test-metrics-token", "Basic dGVzdA==", "Bearer \udc80"],
)
def test_metrics_and_health_details_need_the_metrics_token(client, settings, authorization):
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    response = client.get("/metrics", **headers)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/healthz", **headers).json() == {"status": "ok"}
    authorized = client.get("/metrics", **operator(settings))
    assert authorized.status_code == 200
    assert b"seckill_queue_depth" in authorized.content


@pytest.mark.django_db
def test_with_no_metrics_token_set_no_one_reads_the_metrics(client, settings):
    settings.METRICS_TOKEN = ""
    for authorization in ("Bearer ", "Bearer", "Bearer test-metrics-token"):
        assert client.get("/metrics", HTTP_AUTHORIZATION=authorization).status_code == 401
        assert client.get("/healthz", HTTP_AUTHORIZATION=authorization).json() == {"status": "ok"}


@pytest.mark.django_db
def test_reconciliation_drift_is_exported():
    activity = make_activity(stock=5)
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"]
    labels = {"activity": str(activity.pk)}
    assert REGISTRY.get_sample_value("seckill_reconcile_unexplained_drift_units", {**labels, "side": "redis"}) == 0
    assert REGISTRY.get_sample_value("seckill_reconcile_unexplained_drift_units", {**labels, "side": "db"}) == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_metrics_add_up_across_gunicorn_workers_and_logs_carry_request_ids(process_logs, tmp_path):
    metrics_dir = tmp_path / "prom"
    metrics_dir.mkdir()
    # A drain flag that outlives the test: the three purchases ask for exactly one drain task.
    env = subprocess_env(
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), DJANGO_LOG_FORMAT="json", SECKILL_DRAIN_KICK_TTL_MS="600000"
    )
    process, base = start_gunicorn(process_logs, workers=3, threads=4, env=env)
    try:
        activity = make_activity(stock=3)
        users = make_users(5)
        token = activity_token_ensure(activity_id=activity.pk)
        depth_key = ("seckill_queue_depth", (("queue", settings.CELERY_TASK_DEFAULT_QUEUE),))
        scrape = {"Authorization": f"Bearer {settings.METRICS_TOKEN}"}
        queued_before = _samples(_request(f"{base}/metrics", headers=scrape)[2].decode()).get(depth_key, 0)
        url = f"{base}/api/activities/{activity.pk}/purchase"
        statuses = [
            _request(url, body={"token": token}, headers={"Authorization": f"Token {token_of(u)}"})[0] for u in users
        ]
        assert sorted(statuses) == [202, 202, 202, 410, 410]
        dup = _request(url, body={"token": token}, headers={"Authorization": f"Token {token_of(users[0])}"})
        assert dup[0] == 409
        assert _request(url, body={"token": token})[0] == 401

        assert _request(f"{base}/metrics")[0] == 401
        status, headers, text = _request(f"{base}/metrics", headers=scrape)
        assert status == 200
        samples = _samples(text.decode())
        sale = str(activity.pk)
        code = lambda c: samples.get(("seckill_purchase_total", (("activity", sale), ("code", c))), 0)  # noqa: E731
        assert (code("queued"), code("sold_out"), code("duplicate"), code("not_authenticated")) == (3, 2, 1, 1)
        assert samples[("seckill_script_seconds_count", (("script", "purchase"),))] == 6
        # No worker runs: the three reservations wait in the log, and the one drain task the
        # first of them asked for waits in the queue.
        assert samples[("seckill_reserved_not_ordered", (("activity", str(activity.pk)),))] == 3
        # The broker's reading is kept for a second per process: the new one comes.
        wait_until(
            lambda: (
                _samples(_request(f"{base}/metrics", headers=scrape)[2].decode()).get(depth_key) == queued_before + 1
            ),
            timeout=30,
            what="the queue depth to count the drain task",
        )
        assert samples[("seckill_redis_breaker_state", ())] == 0

        status, headers, _ = _request(f"{base}/api/activities/999999/", headers={"X-Request-ID": "drill-req-42"})
        assert status == 404 and headers["X-Request-ID"] == "drill-req-42"
        status, headers, _ = _request(f"{base}/api/activities/")
        assert len(headers["X-Request-ID"]) == 32  # made up when the caller sends none
    finally:
        process.stop()
    lines = [json.loads(line) for line in process.log().splitlines() if line.startswith("{")]
    assert any(line["request_id"] == "drill-req-42" and "Not Found" in line["msg"] for line in lines), lines[-5:]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_polling_health_and_metrics_opens_no_broker_connection_per_call(process_logs, tmp_path):
    """A broker of this test's own (a real redis-server), so that every connection it
    receives is one the web process opened: polling reuses the process's connection."""
    from kombu import Connection, Exchange, Queue

    from devtools.embedded import redis_server_binary

    from ..helpers import Process

    port = free_port()
    broker = Process(
        "broker", [redis_server_binary(), "--port", str(port), "--save", "", "--appendonly", "no"], {}, tmp_path
    ).start()
    try:
        admin = redis.Redis(port=port, db=settings.SECKILL_TEST_REDIS_DB + 1)
        wait_until(lambda: _pings(admin), timeout=30, what="the test's broker")
        broker_url = f"redis://127.0.0.1:{port}/0"  # the test settings use database N+1 of it
        with Connection(f"redis://127.0.0.1:{port}/{settings.SECKILL_TEST_REDIS_DB + 1}") as conn:
            queue = settings.CELERY_TASK_DEFAULT_QUEUE
            Queue(queue, Exchange(queue), queue, channel=conn.default_channel).declare()  # as a worker would
        process, base = start_gunicorn(
            process_logs, workers=1, threads=4, env=subprocess_env(CELERY_BROKER_URL=broker_url)
        )
        try:
            scrape = {"Authorization": f"Bearer {settings.METRICS_TOKEN}"}
            assert _request(f"{base}/healthz", headers=scrape)[0] == 200
            before = admin.info("stats")["total_connections_received"]
            for _ in range(15):
                status, _, body = _request(f"{base}/healthz", headers=scrape)
                assert status == 200 and json.loads(body)["broker"]["status"] == "ok"
                assert _request(f"{base}/metrics", headers=scrape)[0] == 200
            after = admin.info("stats")["total_connections_received"]
        finally:
            process.stop()
        # Our own INFO connection is one of them; 30 calls opening one each would be 30.
        assert after - before <= 1, (before, after)
    finally:
        broker.stop()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
