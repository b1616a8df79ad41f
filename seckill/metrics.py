"""The sale's metrics that read the sale: the purchase answers by code (middleware) and the
state read when scraped (:class:`LiveStateCollector`): the reserved-not-ordered backlog per
live activity (the reservation logs' lengths) and the broker's queue depth. They are facts of
Redis and the broker, not of a process, so they are read, never accumulated. The event
metric objects live in core.metrics."""

from __future__ import annotations

import logging
import os
import threading

from celery import current_app
from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from core.memory import ProcessMemory, register_reset
from core.metrics import PURCHASES
from seckill.sale.snapshot import live_activities
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

logger = logging.getLogger(__name__)

PURCHASE_URL_NAME = "activity-purchase"


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
            purchase_outcome_count(str(code) if code else f"http_{response.status_code}")
        return response


# code -> PURCHASES.labels(code): looking the child up takes a lock and costs more than
# counting, and the front counts thousands of answers a second. The codes are a handful.
_purchase_counters: dict[str, Counter] = {}


def purchase_outcome_count(code: str) -> None:
    """One answer of the purchase endpoint, by its code (the server's front counts its
    early answers here too)."""
    counter = _purchase_counters.get(code)
    if counter is None:
        counter = PURCHASES.labels(code)
        if len(_purchase_counters) < 64:
            _purchase_counters[code] = counter
    counter.inc()


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
    live = list(live_activities().values_list("pk", "shards"))
    if not live:
        return {}
    pipe = stock_redis().pipeline(transaction=False)
    owners = []
    for activity_id, shards in live:  # every shard's log (S > 1)
        for keys in ActivityKeys(activity_id).shards(shards):
            pipe.xlen(keys.log)
            owners.append(activity_id)
    backlog = dict.fromkeys((a for a, _ in live), 0)
    for activity_id, length in zip(owners, pipe.execute(), strict=True):
        backlog[activity_id] += length
    return backlog


class BrokerUnavailable(RuntimeError):
    """The broker did not answer the last reading (kept for a second, as a reading is)."""


# One broker connection and channel per process, made on first use and again only after an
# error, and one reading kept for BROKER_READING_TTL: polling /healthz and /metrics opens
# no connection per call and asks the broker at most once a second per process.
BROKER_READING_TTL = 1.0
_broker_readings: ProcessMemory[str, dict[str, int] | str] = ProcessMemory("broker queue depth", 1, BROKER_READING_TTL)
_broker_lock = threading.Lock()
_broker: dict = {}


@register_reset
def broker_connection_forget() -> None:
    channel, conn = _broker.pop("channel", None), _broker.pop("connection", None)
    for resource in (channel, conn):
        if resource is not None:
            try:
                resource.close()
            except Exception:  # already broken: nothing more to release
                logger.debug("broker connection close failed", exc_info=True)


def broker_queue_depth() -> dict[str, int]:
    """Messages waiting in the default queue; BrokerUnavailable when the broker does not answer."""
    reading = _broker_readings.get("depth")
    if reading is None:
        with _broker_lock:
            reading = _broker_readings.get("depth")  # another thread may have read it meanwhile
            if reading is None:
                try:
                    reading = _queue_depth_read()
                except Exception as exc:
                    broker_connection_forget()
                    reading = f"{type(exc).__name__}: {exc}"
                _broker_readings.put("depth", reading)
    if isinstance(reading, str):
        raise BrokerUnavailable(reading)
    return reading


def _queue_depth_read() -> dict[str, int]:
    app = current_app
    queue = app.conf.task_default_queue
    if "channel" not in _broker:
        conn = app.connection_for_read()
        _broker["connection"] = conn
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
        _broker["channel"] = conn.channel()
    conn, channel = _broker["connection"], _broker["channel"]
    try:
        # Passive declare: reads the count (Redis LLEN, AMQP message_count), creates nothing.
        _, count, _ = channel.queue_declare(queue=queue, passive=True)
    except conn.channel_errors:
        count = 0  # no such queue yet (an empty Redis list does not exist either)
        if getattr(channel, "is_open", True) is False:  # AMQP closes a channel on that error
            _broker["channel"] = conn.channel()
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
