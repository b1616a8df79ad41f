"""Operator endpoints: ``/healthz`` (database, Redis, broker) and ``/metrics`` (Prometheus).

The public learns only whether the shop is ok (200 ``{"status": "ok"}``) or degraded (503
``{"status": "degraded"}``); which dependency is down and why, and the metrics, are for
whoever sends ``Authorization: Bearer <METRICS_TOKEN>``. With METRICS_TOKEN unset nobody
gets them. Both are cheap to poll: the broker is read through the worker-shared pooled
connection and the reading is kept for a second (seckill.metrics.broker_queue_depth).
"""

from __future__ import annotations

import hmac
import time

from django.conf import settings
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from core.safety import url_passwords_masked
from seckill.metrics import broker_queue_depth, metrics_exposition

NO_STORE = "no-store, max-age=0"


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _check_redis() -> None:
    from stock.redis_client import stock_redis

    stock_redis().ping()


def _check_broker() -> None:
    broker_queue_depth()  # the queue's depth is read from the broker: it answered


CHECKS = {"database": _check_database, "redis": _check_redis, "broker": _check_broker}


def health_report() -> tuple[bool, dict]:
    """Each dependency's state and round-trip time; ok only when all answer."""
    components, ok = {}, True
    for name, check in CHECKS.items():
        started = time.perf_counter()
        try:
            check()
            components[name] = {"status": "ok", "ms": round((time.perf_counter() - started) * 1000, 2)}
        except Exception as exc:  # any failure of a dependency is its state, not our 500
            ok = False
            error = url_passwords_masked(f"{type(exc).__name__}: {exc}")[:300]
            components[name] = {"status": "down", "error": error}
    from stock.breaker import redis_breaker

    components["redis"]["breaker"] = redis_breaker().state
    return ok, components


def operator_authorized(request) -> bool:
    """``Authorization: Bearer <METRICS_TOKEN>``, compared in constant time; never with
    METRICS_TOKEN unset."""
    expected = settings.METRICS_TOKEN
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode("utf-8", "surrogatepass"), expected.encode())


def _no_store(response):
    response["Cache-Control"] = NO_STORE
    return response


@require_GET
def healthz(request):
    ok, components = health_report()
    body: dict = {"status": "ok" if ok else "degraded"}
    if operator_authorized(request):
        body.update(components)
    return _no_store(JsonResponse(body, status=200 if ok else 503))


@require_GET
def metrics(request):
    if not operator_authorized(request):
        response = JsonResponse(
            {
                "code": "not_authenticated",
                "detail": "Send Authorization: Bearer <METRICS_TOKEN> (unset METRICS_TOKEN: no one may read them).",
            },
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return _no_store(response)
    return _no_store(HttpResponse(metrics_exposition(), content_type=CONTENT_TYPE_LATEST))
