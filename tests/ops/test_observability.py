"""/healthz, /metrics (multiprocess mode across real gunicorn workers) and request ids
in the structured logs."""

import json
import urllib.request
from email.message import Message

import pytest
from django.conf import settings
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import REGISTRY

from seckill.activities import activity_token_ensure
from seckill.reconciliation import reconcile
from stock.redis_client import reset_stock_redis

from ..factories import make_activity, make_users, token_of
from ..helpers import free_port, start_gunicorn, subprocess_env


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


@pytest.mark.django_db
def test_healthz_reports_each_dependency(client):
    response = client.get("/healthz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert {body[k]["status"] for k in ("database", "redis", "broker")} == {"ok"}
    assert body["redis"]["breaker"] == "closed"
    assert response["Cache-Control"].startswith("no-store")


@pytest.mark.django_db
def test_healthz_503_when_redis_is_unreachable(client):
    # A real refused connection: nothing listens on this port.
    with override_settings(SECKILL_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        reset_stock_redis()
        response = client.get("/healthz")
    reset_stock_redis()
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "down"
    assert body["redis"]["status"] == "down"
    assert body["database"]["status"] == "ok"


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
        queued_before = _samples(_request(f"{base}/metrics")[2].decode()).get(depth_key, 0)  # e.g. start tasks
        url = f"{base}/api/activities/{activity.pk}/purchase"
        statuses = [
            _request(url, body={"token": token}, headers={"Authorization": f"Token {token_of(u)}"})[0] for u in users
        ]
        assert sorted(statuses) == [202, 202, 202, 410, 410]
        dup = _request(url, body={"token": token}, headers={"Authorization": f"Token {token_of(users[0])}"})
        assert dup[0] == 409
        assert _request(url, body={"token": token})[0] == 401

        status, headers, text = _request(f"{base}/metrics")
        assert status == 200
        samples = _samples(text.decode())
        code = lambda c: samples.get(("seckill_purchase_total", (("code", c),)), 0)  # noqa: E731
        assert (code("queued"), code("sold_out"), code("duplicate"), code("not_authenticated")) == (3, 2, 1, 1)
        assert samples[("seckill_script_seconds_count", (("script", "purchase"),))] == 6
        # No worker runs: the three reservations wait in the log, and the one drain task the
        # first of them asked for waits in the queue.
        assert samples[("seckill_reserved_not_ordered", (("activity", str(activity.pk)),))] == 3
        assert samples[depth_key] == queued_before + 1
        assert samples[("seckill_redis_breaker_state", ())] == 0

        status, headers, _ = _request(f"{base}/api/activities/999999/", headers={"X-Request-ID": "drill-req-42"})
        assert status == 404 and headers["X-Request-ID"] == "drill-req-42"
        status, headers, _ = _request(f"{base}/api/activities/")
        assert len(headers["X-Request-ID"]) == 32  # made up when the caller sends none
    finally:
        process.stop()
    lines = [json.loads(line) for line in process.log().splitlines() if line.startswith("{")]
    assert any(line["request_id"] == "drill-req-42" and "Not Found" in line["msg"] for line in lines), lines[-5:]
