"""Order writes: creation from reservations (the consumer), and later pay and cancel."""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from inventory.services import InsufficientStock, stock_deduct, stock_return
from seckill.models import Activity
from seckill.reservations import order_units_return, reservation_release, reservations_acknowledge
from seckill.scripts import LogEntry

from .models import AnomalyOrder, Order

logger = logging.getLogger(__name__)


def order_number(*, activity_id: int, entry: LogEntry) -> str:
    return f"A{activity_id}-{entry.shard}-{entry.reservation_id}"


@dataclass
class BatchOutcome:
    created: list[str] = field(default_factory=list)  # reservation ids that became orders now
    already_done: list[str] = field(default_factory=list)  # had an order before
    released: list[str] = field(default_factory=list)  # returned to Redis, anomaly opened

    def add(self, other: "BatchOutcome") -> None:
        self.created += other.created
        self.already_done += other.already_done
        self.released += other.released


def anomaly_open(
    *, kind: str, activity_id: int, details: dict, entry: LogEntry | None = None, order: Order | None = None
) -> AnomalyOrder:
    """Record an anomaly; one per (kind, reservation), so a retried task opens it once."""
    user_id = entry.user_id if entry else (order.user_id if order else None)
    if user_id is not None and not get_user_model().objects.filter(pk=user_id).exists():
        # The shopper's row is gone (the very reason a replay may fail): keep the id in
        # the details, since a foreign key to a missing row would fail this insert too.
        details = {**details, "user_id": user_id}
        user_id = None
    if entry is None:
        anomaly, created = (
            AnomalyOrder.objects.create(
                kind=kind, activity_id=activity_id, order=order, user_id=user_id, details=details
            ),
            True,
        )
    else:
        anomaly, created = AnomalyOrder.objects.get_or_create(
            kind=kind,
            activity_id=activity_id,
            reservation_id=entry.reservation_id,
            defaults={"user_id": user_id, "order": order, "details": details},
        )
    if created:
        # A line an alert can fire on.
        logger.warning(
            "seckill.anomaly kind=%s activity=%s anomaly=%s details=%s", kind, activity_id, anomaly.pk, details
        )
    return anomaly


def _insert_orders(activity: Activity, entries: list[LogEntry]) -> list[Order]:
    """INSERT … ON CONFLICT DO NOTHING: rows that clash with either unique constraint
    (reservation already ordered, or shopper already holds a live order) are skipped."""
    now = timezone.now()
    deadline = now + timedelta(seconds=activity.pay_timeout)
    rows, params = [], []
    for e in entries:
        rows.append("(%s, %s, %s, %s, %s, %s, '', %s, %s, %s, %s)")
        params += [
            order_number(activity_id=activity.pk, entry=e),
            activity.pk,
            e.user_id,
            e.quantity,
            activity.seckill_price * e.quantity,
            Order.Status.PENDING,
            e.shard,
            e.reservation_id,
            deadline,
            now,
        ]
    sql = (
        f"INSERT INTO {Order._meta.db_table} (order_no, activity_id, user_id, quantity, amount, status,"
        " cancel_reason, shard, reservation_id, pay_deadline, created_at) VALUES "
        + ", ".join(rows)
        + " ON CONFLICT DO NOTHING RETURNING id, order_no, user_id, quantity, reservation_id, shard"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    return [
        Order(
            pk=pk,
            order_no=no,
            activity=activity,
            user_id=uid,
            quantity=q,
            reservation_id=rid,
            shard=shard,
            pay_deadline=deadline,
        )
        for pk, no, uid, q, rid, shard in returned
    ]


_REFUSAL_REASONS = {AnomalyOrder.Kind.DB_GUARD_FAILED: "no_stock", AnomalyOrder.Kind.DUPLICATE_RESERVATION: "duplicate"}


def _reservation_refuse(*, activity_id: int, entry: LogEntry, kind: str, free_participant: bool) -> None:
    """A reservation the database will not honour: its units go back to Redis, and staff
    get an anomaly. Released first, so a failing anomaly insert cannot keep the stock."""
    live = ""
    if not free_participant:
        live = (
            Order.objects.filter(activity_id=activity_id, user_id=entry.user_id, status__in=Order.LIVE_STATUSES)
            .values_list("reservation_id", flat=True)
            .first()
            or ""
        )
    reservation_release(
        activity_id=activity_id,
        entry=entry,
        free_participant=free_participant,
        reason=_REFUSAL_REASONS[kind],
        live_reservation_id=live,
    )
    anomaly_open(
        kind=kind,
        activity_id=activity_id,
        entry=entry,
        details={"quantity": entry.quantity, "shard": entry.shard, "action": "Redis reservation returned"},
    )


def orders_create_from_reservations(*, activity_id: int, entries: list[LogEntry]) -> BatchOutcome:
    """Turn reservations into orders in one transaction, with the database stock guard.

    Idempotent: a reservation that already has an order counts as done. A reservation
    the database cannot honour (no stock, or the shopper already holds a live order)
    is released in Redis and recorded as an anomaly.
    """
    outcome = BatchOutcome()
    if not entries:
        return outcome
    activity = Activity.objects.only("pk", "seckill_price", "pay_timeout").get(pk=activity_id)
    # A consistent order of inserts keeps two concurrent batches from deadlocking.
    entries = sorted(entries, key=lambda e: (e.shard, e.reservation_id))
    try:
        with transaction.atomic():
            inserted = _insert_orders(activity, entries)
            stock_deduct(activity_id=activity_id, orders=inserted)
    except InsufficientStock:
        if len(entries) > 1:
            # Find the reservations the database cannot honour, one at a time.
            for entry in entries:
                outcome.add(orders_create_from_reservations(activity_id=activity_id, entries=[entry]))
            return outcome
        _reservation_refuse(
            activity_id=activity_id, entry=entries[0], kind=AnomalyOrder.Kind.DB_GUARD_FAILED, free_participant=True
        )
        outcome.released.append(entries[0].reservation_id)
        return outcome

    outcome.created = [o.reservation_id for o in inserted]
    skipped = [e for e in entries if e.reservation_id not in set(outcome.created)]
    if skipped:
        ordered = set(
            Order.objects.filter(
                activity_id=activity_id, reservation_id__in=[e.reservation_id for e in skipped]
            ).values_list("reservation_id", flat=True)
        )
        for entry in skipped:
            if entry.reservation_id in ordered:
                outcome.already_done.append(entry.reservation_id)
                continue
            # The shopper already holds a live order: Redis let a second reservation
            # through (e.g. participants lost in a restart). The constraint said no.
            _reservation_refuse(
                activity_id=activity_id,
                entry=entry,
                kind=AnomalyOrder.Kind.DUPLICATE_RESERVATION,
                free_participant=False,
            )
            outcome.released.append(entry.reservation_id)
    reservations_acknowledge(activity_id=activity_id, reservation_ids=outcome.created + outcome.already_done)
    return outcome


# --- pay and cancel -------------------------------------------------------------
# Every transition is a conditional UPDATE on the current status, so a payment and a
# timeout arriving together end in exactly one outcome, and stock moves exactly once.


class OrderNotPayable(Exception):
    pass


class OrderNotCancellable(Exception):
    pass


def order_pay(*, order: Order, now=None) -> Order:
    """pending -> paid before the deadline; paying a paid order again is a no-op."""
    now = now or timezone.now()
    updated = Order.objects.filter(pk=order.pk, status=Order.Status.PENDING, pay_deadline__gt=now).update(
        status=Order.Status.PAID, paid_at=now
    )
    order.refresh_from_db()
    if not updated and order.status != Order.Status.PAID:
        raise OrderNotPayable(
            f"order {order.order_no} is {order.status}"
            + (" and past its deadline" if order.pay_deadline <= now else "")
        )
    return order


def order_cancel(*, order: Order, reason: str, now=None) -> Order:
    """pending -> cancelled; the units go back to the database and to Redis, once.

    The database part commits first; the Redis part runs after the commit (never inside
    the transaction). If Redis is away then, reconciliation returns the units later.
    """
    now = now or timezone.now()
    with transaction.atomic():
        updated = Order.objects.filter(pk=order.pk, status=Order.Status.PENDING).update(
            status=Order.Status.CANCELLED, cancel_reason=reason, cancelled_at=now
        )
        order.refresh_from_db()
        if not updated:
            if order.status == Order.Status.CANCELLED:
                return order
            raise OrderNotCancellable(f"order {order.order_no} is {order.status}")
        stock_return(activity_id=order.activity_id, orders=[order], reason=f"order_cancelled:{reason}")
        transaction.on_commit(lambda: order_units_return_safely(order=order))
    return order


def order_units_return_safely(*, order: Order) -> bool:
    try:
        return order_units_return(
            activity_id=order.activity_id,
            order_no=order.order_no,
            quantity=order.quantity,
            user_id=order.user_id,
            reservation_id=order.reservation_id,
        )
    except Exception as exc:  # Redis away: reconciliation finds the cancelled order not yet returned
        logger.warning("cancel: Redis return of %s deferred to reconciliation: %s", order.order_no, exc)
        return False
