"""Prometheus metrics of the flash sale (prometheus_client; served at /metrics).

Under several processes (gunicorn workers, Celery) run prometheus_client in
multiprocess mode (PROMETHEUS_MULTIPROC_DIR); the gauges say how to combine processes.
Names are documented in docs/LIFECYCLE.md; alerts rely on them.
"""

from prometheus_client import Counter, Gauge

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
