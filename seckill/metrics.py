"""Prometheus metrics of the flash sale.

Two kinds:

* **Event metrics** (counters, histograms, gauges a process sets): purchase answers by
  code, Lua script latency, the Redis circuit breaker's state, database-path answers;
  and the lifecycle's: anomalies opened, orders cancelled, reconciliation runs, drift
  and buckets (names documented in docs/LIFECYCLE.md; alerts rely on them).
  With ``PROMETHEUS_MULTIPROC_DIR`` set (``make run`` sets it; set it for gunicorn and
  Celery in production, one empty directory per machine, cleared at start) every
  process writes its values there and ``/metrics`` adds them up across gunicorn workers
  and Celery children. Without it each process reports its own values (per-process
  registry): fine for one process, misleading behind a pre-fork server.
* **State metrics** read when scraped (:class:`LiveStateCollector`): the
  reserved-not-ordered backlog per live activity (the reservation logs' lengths) and
  the broker's queue depth. They are facts of Redis and the broker, not of a process,
  so they are read, never accumulated.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

logger = logging.getLogger(__name__)

PURCHASES = Counter("seckill_purchase_total", "Purchase requests answered, by the JSON code of the answer.", ["code"])
SCRIPT_SECONDS = Histogram(
    "seckill_script_seconds",
    "Latency of one Lua script call (round trip to Redis).",
    ["script"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
BREAKER_STATE = Gauge(
    "seckill_redis_breaker_state",
    "Circuit breaker of the stock Redis in this process: 0 closed, 1 half-open, 2 open (max over processes).",
    multiprocess_mode="livemax",
)
FALLBACK_PURCHASES = Counter(
    "seckill_fallback_purchase_total", "Purchases answered by the database path while Redis was away.", ["code"]
)

ANOMALIES_OPENED = Counter("seckill_anomalies_opened_total", "Anomaly orders opened for staff review.", ["kind"])
ORDERS_CANCELLED = Counter(
    "seckill_orders_cancelled_total", "Orders moved pending -> cancelled (stock returned).", ["reason"]
)
RECONCILE_RUNS = Counter("seckill_reconcile_runs_total", "Reconciliation runs by outcome (ok, drift).", ["outcome"])
RECONCILE_UNEXPLAINED_DRIFT = Gauge(
    "seckill_reconcile_unexplained_drift_units",
    "Units of stock drift the last reconciliation could not explain (0 = healthy).",
    ["activity", "side"],
    multiprocess_mode="mostrecent",
)
RECONCILE_BUCKET_ITEMS = Gauge(
    "seckill_reconcile_bucket_items",
    "Items the last reconciliation found in each bucket.",
    ["activity", "bucket"],
    multiprocess_mode="mostrecent",
)

PURCHASE_URL_NAME = "activity-purchase"


@contextmanager
def script_timer(script: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        SCRIPT_SECONDS.labels(script).observe(time.perf_counter() - started)


class PurchaseOutcomeMiddleware:
    """Count every answer of the purchase endpoint by its JSON ``code``, rejections in
    the web process (401, 403, 429) included, without touching the views."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name == PURCHASE_URL_NAME:
            data = getattr(response, "data", None)
            code = data.get("code") if isinstance(data, dict) else None
            PURCHASES.labels(str(code) if code else f"http_{response.status_code}").inc()
        return response


# --- read when scraped ----------------------------------------------------------------


class LiveStateCollector(Collector):
    """Backlog and queue depth, read from Redis and the broker at scrape time."""

    def collect(self):
        backlog = GaugeMetricFamily(
            "seckill_reserved_not_ordered",
            "Reservations in the log without an acknowledged order, per live activity.",
            labels=["activity"],
        )
        try:
            for activity_id, length in reservation_backlog().items():
                backlog.add_metric([str(activity_id)], length)
        except Exception as exc:  # a scrape must answer even with Redis away
            logger.warning("metrics: backlog unavailable: %s", exc)
        yield backlog
        depth = GaugeMetricFamily("seckill_queue_depth", "Messages waiting in the broker queue.", labels=["queue"])
        try:
            for queue, count in broker_queue_depth().items():
                depth.add_metric([queue], count)
        except Exception as exc:
            logger.warning("metrics: queue depth unavailable: %s", exc)
        yield depth


def reservation_backlog() -> dict[int, int]:
    from .keys import ActivityKeys
    from .redis_client import stock_redis
    from .selectors import live_activities

    ids = list(live_activities().values_list("pk", flat=True))
    if not ids:
        return {}
    pipe = stock_redis().pipeline(transaction=False)
    for activity_id in ids:
        pipe.xlen(ActivityKeys(activity_id).log)
    return dict(zip(ids, pipe.execute(), strict=True))


def broker_queue_depth() -> dict[str, int]:
    from config.celery_app import app

    queue = app.conf.task_default_queue
    with app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
        channel = conn.channel()
        try:
            # Passive declare: reads the count (Redis LLEN, AMQP message_count), creates nothing.
            _, count, _ = channel.queue_declare(queue=queue, passive=True)
        except conn.channel_errors:
            count = 0  # no such queue yet (an empty Redis list does not exist either)
        finally:
            try:
                channel.close()
            except conn.connection_errors + conn.channel_errors:
                pass
    return {queue: int(count)}


def metrics_exposition() -> bytes:
    """The text ``/metrics`` answers: the event metrics (merged across processes in
    multiprocess mode) followed by the live state."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    live = CollectorRegistry(auto_describe=False)
    live.register(LiveStateCollector())
    return generate_latest(registry) + generate_latest(live)
