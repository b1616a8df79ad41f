"""Staff actions on anomalies (the admin's buttons): the actions that fit each kind,
resolve with a note, recreate the order a reservation never became, return the units an
anomaly holds, and the history each action leaves. Actions that need the sale's layer
(the warm-up) are registered from above at start-up."""

import logging
from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from inventory.services import InsufficientStock, Share
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import LogEntry, ScriptCode

from ..models import AnomalyOrder, Order, activity_model
from ..selectors import reservation_entry
from .creation import (
    _insert_orders_deducting,
    orders_create_from_reservations,
    orders_expiry_schedule,
    reservation_give_up,
)
from .lifecycle import orders_cancel

logger = logging.getLogger(__name__)


class AnomalyActionError(Exception):
    """A staff action on an anomaly cannot be carried out; the admin shows why."""


def _anomaly_log(*, anomaly: AnomalyOrder, action: str, by, note: str, result: str, resolve: bool) -> AnomalyOrder:
    """Append one entry to the anomaly's history (who, when, what, result); resolve it
    when asked. A conditional update on the status: resolving twice records once."""
    now = timezone.now()
    entry = {"action": action, "by": by.get_username(), "by_id": by.pk, "at": now.isoformat(), "note": note}
    entry["result"] = result
    with transaction.atomic():
        locked = AnomalyOrder.objects.select_for_update().get(pk=anomaly.pk)
        if resolve and locked.status != AnomalyOrder.Status.OPEN:
            raise AnomalyActionError(f"anomaly #{anomaly.pk} is already {locked.status}")
        locked.history = [*locked.history, entry]
        fields = ["history"]
        if resolve:
            locked.status = AnomalyOrder.Status.RESOLVED
            locked.resolution_note = note
            locked.resolved_by = by
            locked.resolved_at = now
            fields += ["status", "resolution_note", "resolved_by", "resolved_at"]
        locked.save(update_fields=fields)
    logger.info("anomaly %s: %s by %s: %s", anomaly.pk, action, by.get_username(), result)
    return locked


def anomaly_log(*, anomaly: AnomalyOrder, action: str, by, note: str, result: str) -> AnomalyOrder:
    """Record a staff action in the anomaly's history (for actions living above orders)."""
    return _anomaly_log(anomaly=anomaly, action=action, by=by, note=note, result=result, resolve=False)


# The actions that fit each kind, resolve last. "rederive" is seckill's (the warm-up):
# it is registered at start-up, since orders may not import seckill.
ANOMALY_KIND_ACTIONS: dict[str, tuple[str, ...]] = {
    AnomalyOrder.Kind.DB_GUARD_FAILED: ("recreate", "resolve"),
    AnomalyOrder.Kind.DUPLICATE_RESERVATION: ("resolve",),
    AnomalyOrder.Kind.REPLAY_EXHAUSTED: ("recreate", "return", "resolve"),
    AnomalyOrder.Kind.PAID_NOT_DEDUCTED: ("resolve",),
    AnomalyOrder.Kind.ORDER_NOT_DEDUCTED: ("return", "resolve"),
    AnomalyOrder.Kind.DRIFT: ("rederive", "resolve"),
}
_ANOMALY_REPAIRS: dict[str, Callable] = {}
# Measures a drift anomaly's activity now: (Redis drift or None, in words), or None.
_DRIFT_PROBE: list[Callable[[int], str | None]] = []


def anomaly_repair_register(*, action: str, service: Callable, drift_probe: Callable[[int], str | None]) -> None:
    _ANOMALY_REPAIRS[action] = service
    _DRIFT_PROBE[:] = [drift_probe]


def anomaly_actions(*, anomaly: AnomalyOrder) -> tuple[str, ...]:
    """The actions offered (and allowed) on this anomaly: those of its kind, while open."""
    if anomaly.status != AnomalyOrder.Status.OPEN:
        return ()
    fits = ANOMALY_KIND_ACTIONS.get(anomaly.kind, ("resolve",))
    return tuple(a for a in fits if a in ("resolve", "recreate", "return") or a in _ANOMALY_REPAIRS)


def anomaly_act(*, anomaly: AnomalyOrder, action: str, by, note: str = ""):
    """Run one of the actions that fit the anomaly's kind; any other is refused."""
    if action not in anomaly_actions(anomaly=anomaly):
        raise AnomalyActionError(f"“{action}” does not apply to this anomaly")
    services: dict[str, Callable] = {
        "resolve": anomaly_resolve,
        "recreate": anomaly_order_recreate,
        "return": anomaly_stock_return,
        **_ANOMALY_REPAIRS,
    }
    return services[action](anomaly=anomaly, by=by, note=note)


def anomaly_resolve(*, anomaly: AnomalyOrder, by, note: str) -> AnomalyOrder:
    """Close an anomaly with a note saying what was done about it. A drift anomaly is
    measured again first: resolving it while the drift remains is allowed (staff may
    know why), but the history says the drift was still there."""
    note = (note or "").strip()
    if not note:
        raise AnomalyActionError("a note is required to resolve an anomaly")
    result = "resolved"
    if anomaly.kind == AnomalyOrder.Kind.DRIFT and _DRIFT_PROBE:
        remaining = _DRIFT_PROBE[0](anomaly.activity_id)
        if remaining:
            result = f"resolved with units still not accounted for: {remaining}"
    return _anomaly_log(anomaly=anomaly, action="resolve", by=by, note=note, result=result, resolve=True)


def anomaly_order_recreate(*, anomaly: AnomalyOrder, by, note: str = "") -> Order:
    """Give the shopper of a reservation that never became an order their order after all.

    The units are taken the normal way: a fresh reservation through the purchase script
    (so Redis and its participants stay right) turned into an order by the consumer
    (the database guard). Once the activity's Redis state is gone (ended), the order
    is written with the database guard alone.
    """
    if anomaly.user_id is None:
        raise AnomalyActionError("this anomaly names no shopper to create an order for")
    existing = Order.objects.filter(
        activity_id=anomaly.activity_id, user_id=anomaly.user_id, status__in=Order.LIVE_STATUSES
    ).first()
    if existing is not None:
        raise AnomalyActionError(f"the shopper already holds order {existing.order_no}")
    activities = activity_model()
    activity = activities.objects.get(pk=anomaly.activity_id)
    quantity = int(anomaly.details.get("quantity") or (anomaly.order.quantity if anomaly.order else 1))
    if activity.status != activities.Status.ENDED:
        reply = StockLayout(activity.pk, activity.shards).reserve(
            stock_redis(), user_id=anomaly.user_id, quantity=quantity, limit=activity.per_user_limit
        )
        if reply.code != ScriptCode.RESERVED:
            reasons = {ScriptCode.DUPLICATE: "the shopper has a reservation", ScriptCode.SOLD_OUT: "sold out"}
            raise AnomalyActionError(f"no unit could be reserved: {reasons.get(reply.code, reply.code)}")
        entry = LogEntry(reply.reservation_id, anomaly.user_id, quantity, reply.shard)
        if not orders_create_from_reservations(activity_id=activity.pk, entries=[entry]).created:
            raise AnomalyActionError("the database refused the order (see the new anomaly)")
    else:
        entry = LogEntry(f"staff-{anomaly.pk}-{int(timezone.now().timestamp())}", anomaly.user_id, quantity, 0)
        try:
            with transaction.atomic():
                inserted = _insert_orders_deducting(
                    activity_id=activity.pk, entries=[entry], share=Share.REDIS, reason="staff_recreate"
                )
        except InsufficientStock as exc:
            raise AnomalyActionError(f"the database has no stock: {exc}") from exc
        orders_expiry_schedule(orders=inserted)
    order = Order.objects.get(activity_id=activity.pk, shard=entry.shard, reservation_id=entry.reservation_id)
    AnomalyOrder.objects.filter(pk=anomaly.pk, order__isnull=True).update(order=order)
    _anomaly_log(
        anomaly=anomaly, action="recreate_order", by=by, note=note, result=f"order {order.order_no}", resolve=False
    )
    return order


def anomaly_stock_return(*, anomaly: AnomalyOrder, by, note: str = "") -> str:
    """Give back the units an anomaly holds: its pending order is cancelled (database
    and Redis, once), or its reservation still in the Redis log is released."""
    result = ""
    if anomaly.order_id is not None:
        moved = orders_cancel(order_ids=[anomaly.order_id], reason="staff", now=timezone.now(), due_only=False)
        if not moved:
            order = Order.objects.get(pk=anomaly.order_id)
            raise AnomalyActionError(f"nothing to return: order {order.order_no} is {order.status}")
        result = f"order {moved[0].order_no} cancelled, {moved[0].quantity} unit(s) returned"
    elif anomaly.reservation_id:
        entry = reservation_entry(
            activity_id=anomaly.activity_id,
            reservation_id=anomaly.reservation_id,
            shard=anomaly.shard,
        )
        if entry and reservation_give_up(activity_id=anomaly.activity_id, entry=entry, reason="staff"):
            result = f"reservation {entry.reservation_id} released, {entry.quantity} unit(s) returned"
    if not result:
        raise AnomalyActionError("nothing to return: the units were already given back")
    _anomaly_log(anomaly=anomaly, action="return_stock", by=by, note=note, result=result, resolve=False)
    return result
