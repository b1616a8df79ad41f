"""The sale's metrics that read the sale: the purchase answers by code and sale (the
middleware and the server's front count them) and the state read when scraped
(:class:`LiveStateCollector`): the reserved-not-ordered backlog per live activity (the
reservation logs' lengths) and the broker's queue depth. They are facts of
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
from seckill.sale.snapshot import (
    activity_id_ceiling,
    activity_snapshot,
    activity_snapshot_remembered,
    live_activities,
)
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

logger = logging.getLogger(__name__)

PURCHASE_URL_NAME = "activity-purchase"


class PurchaseOutcomeMiddleware:
    """Count every answer of the purchase endpoint by its JSON ``code`` and its sale,
    rejections in the web process (401, 403, 429) included, without touching the views."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name == PURCHASE_URL_NAME:
            data = getattr(response, "data", None)
            code = data.get("code") if isinstance(data, dict) else None
            code = str(code) if code else f"http_{response.status_code}"
            purchase_outcome_count(code, match.kwargs.get("activity_id"), look_up=True)
        return response


# The ``activity`` label of every id that is no sale: made-up ids in a flood add no value.
UNKNOWN_SALE = "unknown"


def sale_label(activity_id: int | None) -> str:
    """The sale's id when this process's memory holds the sale, else UNKNOWN_SALE: no I/O,
    so the server's front may call it on its event loop."""
    if activity_id is None:
        return UNKNOWN_SALE
    _known, snapshot = activity_snapshot_remembered(activity_id)
    return UNKNOWN_SALE if snapshot is None else str(activity_id)


def sale_label_looked_up(activity_id: int | None) -> str:
    """As ``sale_label``, with the sale looked up when the memory does not know the id (a
    refusal before the view read the sale: not signed in, a page expired). At most once
    per id up to the highest id, itself remembered: made-up ids cost no query of their own."""
    if activity_id is None:
        return UNKNOWN_SALE
    known, snapshot = activity_snapshot_remembered(activity_id)
    if not known:
        try:
            if activity_id <= activity_id_ceiling():
                snapshot = activity_snapshot(activity_id)
        except Exception as exc:  # the answer is made: counting never fails it
            logger.warning("purchase counted as of an unknown sale: %s", exc)
    return UNKNOWN_SALE if snapshot is None else str(activity_id)


# (code, activity id) -> PURCHASES.labels(code, sale): looking the child up takes a lock
# and costs more than counting, and the front counts thousands of answers a second. Only
# real sales have their own entry; every made-up id shares (code, None).
PURCHASE_COUNTERS_KEPT = 1024
_purchase_counters: dict[tuple[str, int | None], Counter] = {}


def purchase_outcome_count(code: str, activity_id: int | None = None, *, look_up: bool = False) -> None:
    """One answer of the purchase endpoint, by its code and its sale (the server's front
    counts its early answers here too). ``look_up``: the sale may be read when this
    process does not remember it (a web thread's answer; never on the event loop)."""
    counter = _purchase_counters.get((code, activity_id))
    if counter is None:
        counter = _purchase_counter(code, activity_id, look_up=look_up)
    counter.inc()


def _purchase_counter(code: str, activity_id: int | None, *, look_up: bool) -> Counter:
    sale = sale_label_looked_up(activity_id) if look_up else sale_label(activity_id)
    key = (code, None if sale == UNKNOWN_SALE else activity_id)
    counter = _purchase_counters.get(key)
    if counter is None:
        counter = PURCHASES.labels(code=code, activity=sale)
        if len(_purchase_counters) >= PURCHASE_COUNTERS_KEPT:
            _purchase_counters.clear()  # ended sales' children: labels() makes them again
        _purchase_counters[key] = counter
    return counter


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
