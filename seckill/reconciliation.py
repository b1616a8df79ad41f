"""Reconciliation: the two identities of DESIGN.md, checked on a consistent snapshot.

stock loaded into Redis = Redis remaining + reserved-not-ordered + pending + paid units
DB total                = DB available + pending + paid units
"""

import logging

from django.db.models import Count, Q, Sum
from django.utils import timezone

from inventory.models import SeckillStock, StockMovement
from orders.models import Order

from .keys import ActivityKeys
from .metrics import reconcile_observe
from .redis_client import stock_redis
from .scripts import RedisSnapshot, run_snapshot

logger = logging.getLogger(__name__)

_SNAPSHOT_TRIES = 5


def _db_figures(activity_id: int, log_ids: list[str]) -> dict:
    stock = SeckillStock.objects.get(activity_id=activity_id)
    sums = Order.objects.filter(activity_id=activity_id).aggregate(
        pending=Sum("quantity", filter=Q(status=Order.Status.PENDING), default=0),
        paid=Sum("quantity", filter=Q(status=Order.Status.PAID), default=0),
        cancelled=Sum("quantity", filter=Q(status=Order.Status.CANCELLED), default=0),
        pending_overdue=Count("id", filter=Q(status=Order.Status.PENDING, pay_deadline__lt=timezone.now())),
    )
    ordered_log_ids = set(
        Order.objects.filter(activity_id=activity_id, reservation_id__in=log_ids).values_list(
            "reservation_id", flat=True
        )
    )
    paid_not_deducted = (
        Order.objects.filter(activity_id=activity_id, status=Order.Status.PAID)
        .exclude(stock_movements__kind=StockMovement.Kind.DEDUCT)
        .count()
    )
    return {
        "db_total": stock.total,
        "db_available": stock.available,
        "units_pending": sums["pending"],
        "units_paid": sums["paid"],
        "units_cancelled": sums["cancelled"],
        "pending_overdue": sums["pending_overdue"],
        "paid_not_deducted": paid_not_deducted,
        "ordered_log_ids": ordered_log_ids,
    }


def reconciliation_snapshot(*, activity_id: int) -> tuple[RedisSnapshot, dict]:
    """Redis, then the database, then Redis again; equal Redis reads bracket a
    consistent database read (orders are committed before their log entry goes)."""
    client, keys = stock_redis(), ActivityKeys(activity_id)
    before = run_snapshot(client, keys)
    for _ in range(_SNAPSHOT_TRIES):
        db = _db_figures(activity_id, [e.reservation_id for e in before.log])
        after = run_snapshot(client, keys)
        if after == before:
            return after, db
        before = after
    logger.info("reconcile: activity %s kept moving; using the last snapshot", activity_id)
    return after, db


def reconcile(*, activity_id: int) -> dict:
    """Check the identities now and return the report (see API.md for its keys)."""
    redis_state, db = reconciliation_snapshot(activity_id=activity_id)
    unordered = [e for e in redis_state.log if e.reservation_id not in db["ordered_log_ids"]]
    reserved_not_ordered = sum(e.quantity for e in unordered)
    live_units = db["units_pending"] + db["units_paid"]
    db_ok = db["db_total"] == db["db_available"] + live_units
    if redis_state.warmed:
        redis_drift = redis_state.loaded - (redis_state.stock + reserved_not_ordered + live_units)
        redis_ok = redis_drift == 0
    else:
        redis_drift, redis_ok = None, None  # not warmed yet, or cleaned up after the end
    report = {
        "activity": activity_id,
        "redis_loaded": redis_state.loaded,
        "redis_remaining": redis_state.stock,
        "reserved_not_ordered": reserved_not_ordered,
        "db_total": db["db_total"],
        "db_available": db["db_available"],
        "units_pending": db["units_pending"],
        "units_paid": db["units_paid"],
        "units_cancelled": db["units_cancelled"],
        "redis_drift": redis_drift,
        "db_drift": db["db_total"] - db["db_available"] - live_units,
        "buckets": {
            "reserved_not_ordered": len(unordered),
            "pending_past_deadline": db["pending_overdue"],
            "paid_not_deducted": db["paid_not_deducted"],
            "unexplained_drift": int(bool(redis_drift)) + int(not db_ok),
        },
        "anomalies_opened": 0,
        "identity_ok": db_ok and redis_ok is not False,
        "checked_at": timezone.now().isoformat(),
    }
    reconcile_observe(report)
    if not report["identity_ok"]:
        logger.warning("seckill.reconcile.drift activity=%s report=%s", activity_id, report)
    return report
