"""Anomalies: a fault recorded once for staff (with a line an alert can fire on), and
the repair reconciliation makes before it records one (an order never deducted)."""

import logging

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from core import metrics
from inventory.services import InsufficientStock, Share, stock_deduct
from stock.scripts import LogEntry

from ..models import AnomalyOrder, Order

logger = logging.getLogger(__name__)


def anomaly_record(
    *,
    kind: str,
    activity_id: int,
    details: dict,
    entry: LogEntry | None = None,
    order: Order | None = None,
    fault_key: str = "",
) -> tuple[AnomalyOrder, bool]:
    """Record an anomaly once per fault: per (kind, shard, reservation) when it concerns
    a reservation, per (kind, fault_key) otherwise. Returns (anomaly, opened now)."""
    user_id = entry.user_id if entry else (order.user_id if order else None)
    if user_id is not None and not get_user_model().objects.filter(pk=user_id).exists():
        # The shopper's row is gone (the very reason a replay may fail): keep the id in
        # the details, since a foreign key to a missing row would fail this insert too.
        details = {**details, "user_id": user_id}
        user_id = None
    # The shard names the units' home (S > 1), and with the id the reservation: log ids
    # are unique per shard only.
    shard = entry.shard if entry is not None else (order.shard if order is not None else 0)
    defaults = {"user_id": user_id, "order": order, "details": details, "shard": shard}
    if entry is not None:
        anomaly, created = AnomalyOrder.objects.get_or_create(
            kind=kind, activity_id=activity_id, shard=shard, reservation_id=entry.reservation_id, defaults=defaults
        )
    elif fault_key:
        anomaly, created = AnomalyOrder.objects.get_or_create(
            kind=kind, activity_id=activity_id, fault_key=fault_key, defaults=defaults
        )
    else:
        anomaly, created = AnomalyOrder.objects.create(kind=kind, activity_id=activity_id, **defaults), True
    if created:
        metrics.ANOMALIES_OPENED.labels(kind=kind).inc()
        # A line an alert can fire on.
        logger.warning(
            "seckill.anomaly kind=%s activity=%s anomaly=%s details=%s", kind, activity_id, anomaly.pk, details
        )
    return anomaly, created


def anomaly_open(
    *, kind: str, activity_id: int, details: dict, entry: LogEntry | None = None, order: Order | None = None
) -> AnomalyOrder:
    """Record an anomaly; one per (kind, reservation), so a retried task opens it once."""
    return anomaly_record(kind=kind, activity_id=activity_id, details=details, entry=entry, order=order)[0]


def order_deduction_repair(*, order: Order, reason: str = "reconcile_missing_deduct") -> bool:
    """Take a live order's units from the database stock when it never was (no DEDUCT
    row). Once per order: the ledger's unique (order, kind) turns a second try into a
    rollback. Returns True when deducted now."""
    share = Share.RESERVE if order.from_reserve else Share.REDIS
    try:
        with transaction.atomic():
            stock_deduct(activity_id=order.activity_id, orders=[order], share=share, reason=reason)
    except (InsufficientStock, IntegrityError):
        return False
    return True
