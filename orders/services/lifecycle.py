"""An order's life after creation: pay, cancel (by the shopper, staff or the payment
deadline: the deadline task and the sweeper) and the units' return to Redis.

Every transition is a conditional UPDATE on the current status, so a payment and a
timeout arriving together end in exactly one outcome, and stock moves exactly once."""

import logging

from django.db import connection, transaction
from django.utils import timezone

from core import metrics
from inventory.services import Share, stock_return
from stock.handover import released_units_hand_over
from stock.reservations import order_participant_free, orders_units_back
from stock.scripts import UnitsBack

from ..mails import order_mails_enqueue
from ..models import Order, activity_model

logger = logging.getLogger(__name__)


CANCEL_TIMEOUT = "timeout"


class OrderNotPayable(Exception):
    """The order is cancelled, or past its deadline: the API answers 409 not_payable."""


class OrderNotCancellable(Exception):
    """The order is paid: the API answers 409 not_cancellable."""


def order_pay(*, order: Order, now=None) -> Order:
    """pending -> paid before the deadline; paying a paid order again is a no-op."""
    now = now or timezone.now()
    updated = Order.objects.filter(pk=order.pk, status=Order.Status.PENDING, pay_deadline__gt=now).update(
        status=Order.Status.PAID, paid_at=now
    )
    order.refresh_from_db()
    if updated:
        order_mails_enqueue(kind="paid", order_ids=[order.pk])  # the receipt, after the commit
    if not updated and order.status != Order.Status.PAID:
        raise OrderNotPayable(
            f"order {order.order_no} is {order.status}"
            + (" and past its deadline" if order.pay_deadline <= now else "")
        )
    return order


_CANCEL_SQL = """
WITH moving AS (
    SELECT id FROM {table}
    WHERE id = ANY(%s) AND status = 'pending' {due}
    ORDER BY id
    FOR UPDATE {skip}
)
UPDATE {table} AS o SET status = 'cancelled', cancel_reason = %s, cancelled_at = %s
FROM moving WHERE o.id = moving.id
RETURNING o.id, o.activity_id, o.order_no, o.user_id, o.quantity, o.reservation_id, o.shard
"""


def orders_cancel(*, order_ids: list[int], reason: str, now, due_only: bool, skip_locked: bool = False) -> list[Order]:
    """pending -> cancelled for those of ``order_ids`` still pending (and, with
    ``due_only``, past their deadline); their units go back to the database now and to
    Redis after the commit. Returns the orders this call moved, and only those: a
    payment or another cancel that won the row moves nothing here.

    ``skip_locked`` (the sweeper): leave rows another transaction is changing right now.
    """
    if not order_ids:
        return []
    sql = _CANCEL_SQL.format(
        table=Order._meta.db_table,
        due="AND pay_deadline <= %s" if due_only else "",
        skip="SKIP LOCKED" if skip_locked else "",
    )
    params = [sorted(order_ids), *([now] if due_only else []), reason, now]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        cancelled = [
            Order(
                pk=pk,
                activity_id=activity_id,
                order_no=no,
                user_id=user_id,
                quantity=quantity,
                reservation_id=rid,
                shard=shard,
                status=Order.Status.CANCELLED,
                cancel_reason=reason,
                cancelled_at=now,
            )
            for pk, activity_id, no, user_id, quantity, rid, shard in rows
        ]
        for activity_id in sorted({o.activity_id for o in cancelled}):
            for share in (Share.REDIS, Share.RESERVE):  # each unit back to the share it was sold from
                group = [
                    o for o in cancelled if o.activity_id == activity_id and o.from_reserve == (share is Share.RESERVE)
                ]
                stock_return(activity_id=activity_id, orders=group, share=share, reason=f"order_cancelled:{reason}")
        if cancelled:
            # robust: the cancel is committed; a failure here is logged and reconciliation returns the units.
            transaction.on_commit(lambda: orders_units_return(orders=cancelled), robust=True)
            order_mails_enqueue(kind="cancelled", order_ids=[o.pk for o in cancelled])
    if cancelled:
        metrics.ORDERS_CANCELLED.labels(reason=reason).inc(len(cancelled))
    return cancelled


def order_cancel(*, order: Order, reason: str, now=None) -> Order:
    """pending -> cancelled; the units go back to the database and to Redis, once.

    ``reason="timeout"`` cancels only past the payment deadline (the deadline task, the
    sweeper, reconciliation); the shopper ("shopper") or staff may cancel any time.
    Cancelling a cancelled order again is a no-op. The Redis part runs after the
    commit; if Redis is away then, reconciliation returns the units later.
    """
    now = now or timezone.now()
    moved = orders_cancel(order_ids=[order.pk], reason=reason, now=now, due_only=reason == CANCEL_TIMEOUT)
    order.refresh_from_db()
    if moved or order.status == Order.Status.CANCELLED:
        return order
    if order.status == Order.Status.PENDING:
        raise OrderNotCancellable(f"order {order.order_no} is not past its payment deadline")
    raise OrderNotCancellable(f"order {order.order_no} is {order.status}")


def orders_units_return(*, orders: list[Order]) -> int:
    """The one place cancelled orders' units go back to Redis (each order carries the
    shard its units came from) and their shoppers are freed; returns how many went back
    now. Each activity's orders go together, in one or two round trips however many they
    are: a batch of expiries is committed at once, and every shopper of it may buy again
    within the memory bound (docs/API.md), not one round trip per order later.

    An ended activity has no Redis state left to return to: the database is the truth
    then. A database-path order's units never were in Redis: the cancel released them to
    Redis's share in the database (``stock_return``), the hand-over adds them to Redis's
    stock, and its shopper is freed. Redis away: reconciliation finds the cancelled orders
    not yet returned and returns them."""
    activities = activity_model()
    live = set(
        activities.objects.filter(pk__in={o.activity_id for o in orders})
        .exclude(status=activities.Status.ENDED)
        .values_list("pk", flat=True)
    )
    by_activity: dict[int, list[Order]] = {}
    for order in orders:
        if order.activity_id in live:
            by_activity.setdefault(order.activity_id, []).append(order)
    returned = 0
    for activity_id, group in sorted(by_activity.items()):
        try:
            returned += _activity_units_return(activity_id, group)
        except Exception as exc:  # Redis away: reconciliation finds them not yet returned
            logger.warning(
                "cancel: Redis return of %s deferred to reconciliation: %s", [o.order_no for o in group], exc
            )
    return returned


def _activity_units_return(activity_id: int, orders: list[Order]) -> int:
    from_redis = [o for o in orders if not o.from_reserve]
    returned = sum(
        orders_units_back(
            activity_id=activity_id,
            returns=[UnitsBack(o.order_no, o.quantity, o.user_id, o.reservation_id, o.shard) for o in from_redis],
        )
    )
    from_reserve = [o for o in orders if o.from_reserve]
    if from_reserve:
        freed = [
            order_participant_free(activity_id=activity_id, user_id=o.user_id, reservation_id=o.reservation_id)
            for o in from_reserve
        ]
        handed = released_units_hand_over(activity_id=activity_id) > 0
        returned += sum(1 for f in freed if f or handed)
    return returned


# --- the payment deadline: the deadline task and the sweeper ----------------------------


def orders_expire_due(*, activity_id: int, due_second: int, now=None) -> int | None:
    """The deadline task: cancel the activity's pending orders past their deadline.
    None when it runs before ``due_second`` (a clock ahead elsewhere): try again then."""
    now = now or timezone.now()
    if now.timestamp() < due_second:
        return None
    return orders_expire_overdue(activity_id=activity_id, now=now)


def orders_expire_overdue(*, activity_id: int | None = None, now=None, batch_size: int = 500) -> int:
    """The sweeper (and reconciliation): cancel every pending order past its deadline,
    oldest first, one transaction per batch. Returns how many it cancelled."""
    now = now or timezone.now()
    overdue = Order.objects.filter(status=Order.Status.PENDING, pay_deadline__lte=now)
    if activity_id is not None:
        overdue = overdue.filter(activity_id=activity_id)
    total = 0
    while True:
        ids = list(overdue.order_by("pay_deadline", "id").values_list("pk", flat=True)[:batch_size])
        moved = orders_cancel(order_ids=ids, reason=CANCEL_TIMEOUT, now=now, due_only=True, skip_locked=True)
        total += len(moved)
        if not moved:  # nothing left, or only rows a payment holds right now
            return total
