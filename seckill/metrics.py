"""The sale's metrics that read the sale: the purchase answers by code (middleware) and the
state read when scraped (:class:`LiveStateCollector`): the reserved-not-ordered backlog per
live activity (the reservation logs' lengths) and the broker's queue depth. They are facts of
Redis and the broker, not of a process, so they are read, never accumulated. The event
metric objects live in core.metrics."""

from __future__ import annotations

import logging
import os

from celery import current_app
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from core.metrics import PURCHASES
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from .selectors import live_activities

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


def broker_queue_depth() -> dict[str, int]:
    app = current_app
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
