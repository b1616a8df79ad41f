"""Prometheus metric objects of the flash sale (the events every layer counts).

Two kinds:

* **Event metrics** (counters, histograms, gauges a process sets): purchase answers by
  code and sale, Lua script latency, the Redis circuit breaker's state, database-path answers;
  and the lifecycle's: anomalies opened, orders cancelled, reconciliation runs, drift
  and buckets (names documented in docs/LIFECYCLE.md; alerts rely on them).
  With ``PROMETHEUS_MULTIPROC_DIR`` set (``make run`` sets it; set it for gunicorn and
  Celery in production, one empty directory per machine, cleared at start) every
  process writes its values there and ``/metrics`` adds them up across gunicorn workers
  and Celery children. Without it each process reports its own values (per-process
  registry): fine for one process, misleading behind a pre-fork server.
* The state read when scraped (backlog, queue depth) is the sale's: seckill.metrics.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

PURCHASES = Counter(
    "seckill_purchase_total",
    "Purchase requests answered, by the answer's JSON code and by sale. "
    "`activity` is the sale's id, or `unknown` for an id that is no sale. "
    "`sum by (code)` gives the shop's figure.",
    ["code", "activity"],
)
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
RECONCILE_RUNS = Counter(
    "seckill_reconcile_runs_total",
    "Reconciliation runs by outcome (ok, drift, moving: the sale kept moving, nothing measured).",
    ["outcome"],
)
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


class script_timer:  # lower case: used as a function, ``with script_timer("purchase"):``
    """Times one Lua script call into SCRIPT_SECONDS. A class with the label's child kept,
    not a generator with ``labels()`` each time: a purchase runs it twice."""

    __slots__ = ("_child", "_started")
    _children: dict[str, Any] = {}

    def __init__(self, script: str):
        child = self._children.get(script)
        if child is None:
            child = self._children.setdefault(script, SCRIPT_SECONDS.labels(script))
        self._child = child
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(self, *exc_info) -> None:
        self._child.observe(time.perf_counter() - self._started)
