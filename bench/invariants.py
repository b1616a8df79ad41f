"""The invariant checker run after every scenario: no oversell, no shopper twice, and
the reconciliation identities of DESIGN.md (``seckill.sale.reconciliation.reconcile``)."""

from __future__ import annotations

from django.db.models import Count, Sum

from orders.models import AnomalyOrder, Order
from seckill.models import Activity
from seckill.sale.reconciliation import reconcile
from stock.layout import StockLayout
from stock.redis_client import stock_redis


class InvariantBroken(AssertionError):
    """A benchmark broke an invariant (oversell, a shopper twice, an identity): the run fails."""


def invariants_check(*, activity_id: int, redis_path: bool = True) -> dict:
    """Check one activity; raise InvariantBroken with the report when anything is off."""
    activity = Activity.objects.get(pk=activity_id)
    report = reconcile(activity_id=activity_id, dry_run=True)  # measure only, repair nothing
    live = Order.objects.filter(activity_id=activity_id, status__in=Order.LIVE_STATUSES)
    live_units = live.aggregate(units=Sum("quantity", default=0))["units"]
    twice = live.values("user_id").annotate(n=Count("id")).filter(n__gt=1).count()
    problems = []
    if not report["identity_ok"]:
        problems.append("reconciliation identity broken")
    if any(report.get("unexplained_drift", {}).values()):
        problems.append(f"unexplained drift {report['unexplained_drift']}")
    if report["db_available"] < 0 or live_units > activity.total_stock:
        problems.append(f"oversell in the database: {live_units} units in orders of {activity.total_stock}")
    if twice:
        problems.append(f"{twice} shoppers hold two live orders")
    anomalies = AnomalyOrder.objects.filter(activity_id=activity_id).count()
    if anomalies:
        problems.append(f"{anomalies} anomaly orders opened")
    if redis_path:
        layout = StockLayout(activity_id, activity.shards)
        snapshot = layout.snapshot(stock_redis())
        ordered_users = set(live.values_list("user_id", flat=True))
        ordered_ids = set(live.values_list("reservation_id", flat=True))
        # Entries already ordered but not yet acknowledged count once, as orders.
        log_users = [e.user_id for e in snapshot.log if e.reservation_id not in ordered_ids]
        if snapshot.stock is None or snapshot.stock < 0:
            problems.append(f"Redis stock is {snapshot.stock}")
        if len(set(log_users)) != len(log_users) or ordered_users & set(log_users):
            problems.append("a shopper holds two reservations")
        if report["reserved_not_ordered"] + live_units > (snapshot.loaded or 0):
            problems.append("oversell in Redis: more reserved and ordered than loaded")
        # S > 1: each shopper's claim lives in one user partition, not in a shard.
        holders = layout.partitions or [layout.keys]
        participants = sum(stock_redis().hlen(k.users) for k in holders)
        if participants != len(ordered_users) + len(log_users):
            problems.append(
                f"participants {participants} != orders + reservations {len(ordered_users) + len(log_users)}"
            )
    report.update({"live_order_units": live_units, "shoppers_twice": twice, "anomalies": anomalies})
    if problems:
        raise InvariantBroken(f"activity {activity_id}: {'; '.join(problems)}\n{report}")
    return report
