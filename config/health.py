"""Operator endpoints: ``/healthz`` (database, Redis, broker) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import time

from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from seckill.metrics import metrics_exposition

NO_STORE = "no-store, max-age=0"


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _check_redis() -> None:
    from stock.redis_client import stock_redis

    stock_redis().ping()


def _check_broker() -> None:
    from config.celery_app import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)


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
            components[name] = {"status": "down", "error": f"{type(exc).__name__}: {exc}"[:300]}
    from seckill.breaker import redis_breaker

    components["redis"]["breaker"] = redis_breaker().state
    return ok, components


@require_GET
def healthz(request):
    ok, components = health_report()
    response = JsonResponse({"status": "ok" if ok else "down", **components}, status=200 if ok else 503)
    response["Cache-Control"] = NO_STORE
    return response


@require_GET
def metrics(request):
    response = HttpResponse(metrics_exposition(), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = NO_STORE
    return response
