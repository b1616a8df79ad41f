"""Order writes: creation from reservations (the consumer), and later pay and cancel; the
shopper's shipping address and its copy on an order."""

import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import redis
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core import metrics
from core.memory import register_reset
from inventory.services import (
    InsufficientStock,
    Share,
    prepared_cursor,
    stock_deduct,
    stock_deduct_inserting,
    stock_lock,
    stock_return,
)
from seckill.models import Activity
from stock.handover import released_units_hand_over
from stock.keys import ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.reservations import (
    order_participant_free,
    order_units_return,
    reservation_release,
    reservations_acknowledge_entries,
)
from stock.scripts import LogEntry, ScriptCode

from .models import DB_PATH_PREFIX, AnomalyOrder, Order, ReleasedReservation, ShippingAddress

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


# One statement text whatever the batch size: the rows travel as arrays, so the driver
# neither parses a thousand placeholders nor adapts each value on its own. The price and
# the payment timeout come from the activity's row in the same statement (no activity
# query per batch). That price is the one the unit was reserved at: it is locked from the
# warm-up on, before any reservation can exist (seckill.sale.activities.activity_locked_fields).
_INSERT_ORDERS_SQL = """
INSERT INTO {orders} (order_no, activity_id, user_id, quantity, amount, status, cancel_reason, shard,
                      reservation_id, pay_deadline, created_at)
SELECT r.order_no, a.id, r.user_id, r.quantity, a.seckill_price * r.quantity, %(status)s, '', r.shard,
       r.reservation_id, %(now)s + make_interval(secs => a.pay_timeout), %(now)s
FROM {activities} AS a,
     unnest(%(order_nos)s::varchar[], %(user_ids)s::bigint[], %(quantities)s::integer[],
            %(shards)s::smallint[], %(reservation_ids)s::varchar[])
         WITH ORDINALITY AS r(order_no, user_id, quantity, shard, reservation_id, position)
WHERE a.id = %(activity_id)s
ORDER BY r.position
ON CONFLICT DO NOTHING
RETURNING id, order_no, user_id, quantity, reservation_id, shard, pay_deadline
"""


class NewOrder(NamedTuple):
    """An order row just inserted: what the ledger, the deadline scheduling and the
    caller need from it. A tuple, not a model instance: a batch makes a hundred."""

    pk: int
    order_no: str
    activity_id: int
    user_id: int
    quantity: int
    reservation_id: str
    shard: int
    pay_deadline: datetime


def _insert_params(activity_id: int, entries: list[LogEntry]) -> dict[str, Any]:
    return {
        "activity_id": activity_id,
        "status": Order.Status.PENDING,
        "now": timezone.now(),
        "order_nos": [order_number(activity_id=activity_id, entry=e) for e in entries],
        "user_ids": [e.user_id for e in entries],
        "quantities": [e.quantity for e in entries],
        "shards": [e.shard for e in entries],
        "reservation_ids": [e.reservation_id for e in entries],
    }


def _new_orders(activity_id: int, rows) -> list[NewOrder]:
    return [
        NewOrder(pk, no, activity_id, uid, q, rid, shard, deadline) for pk, no, uid, q, rid, shard, deadline in rows
    ]


def _insert_orders(*, activity_id: int, entries: list[LogEntry]) -> list[NewOrder]:
    """INSERT … ON CONFLICT DO NOTHING: rows that clash with either unique constraint
    (reservation already ordered, or shopper already holds a live order) are skipped,
    and so is every row when the activity does not exist. Rows are inserted in the
    order of ``entries``. No stock moves (``_insert_orders_deducting`` takes it too)."""
    sql = _INSERT_ORDERS_SQL.format(orders=Order._meta.db_table, activities=Activity._meta.db_table)
    with prepared_cursor() as cursor:
        cursor.execute(sql, _insert_params(activity_id, entries))
        return _new_orders(activity_id, cursor.fetchall())


def _insert_orders_deducting(
    *, activity_id: int, entries: list[LogEntry], share: Share, reason: str = "order_created"
) -> list[NewOrder]:
    """``_insert_orders`` and the deduction of the inserted rows' units from ``share``
    with their ledger rows, in one statement. Raises InsufficientStock (leave the
    transaction: the rows were inserted) when the share lacks their units."""
    sql = _INSERT_ORDERS_SQL.format(orders=Order._meta.db_table, activities=Activity._meta.db_table)
    rows = stock_deduct_inserting(
        activity_id=activity_id, insert_sql=sql, params=_insert_params(activity_id, entries), share=share, reason=reason
    )
    return _new_orders(activity_id, rows)


_REFUSAL_REASONS: dict[str, str] = {
    AnomalyOrder.Kind.DB_GUARD_FAILED: "no_stock",
    AnomalyOrder.Kind.DUPLICATE_RESERVATION: "duplicate",
}
# The database guard found no units for it: they do not exist, so they never go back on
# sale in Redis (they leave Redis's ``loaded``). Every other give-up's units exist.
_NO_SUCH_UNITS = "no_stock"


def reservation_give_up(*, activity_id: int, entry: LogEntry, reason: str) -> bool:
    """Give a reservation back for good: record in the database that it will never
    become an order, then return its units to Redis. False, and nothing moves, when it
    has an order already (the order holds the units).

    The record is written under the stock row's lock, which every order creation takes
    too: an order committed before is seen here, and a consumer still inserting one
    finds the record after its own lock and backs out (``orders_create_from_reservations``).
    Without it a late or concurrent consumer could order units already back on sale.
    If the Redis release fails after the commit, the entry stays in the log and the
    next drain or replay releases it (it finds the record).
    """
    with transaction.atomic():
        stock_lock(activity_id=activity_id)
        if Order.objects.filter(
            activity_id=activity_id, shard=entry.shard, reservation_id=entry.reservation_id
        ).exists():
            return False
        ReleasedReservation.objects.bulk_create(
            [
                ReleasedReservation(
                    activity_id=activity_id, shard=entry.shard, reservation_id=entry.reservation_id, reason=reason
                )
            ],
            ignore_conflicts=True,
        )
    _reservation_units_back(activity_id=activity_id, entry=entry, reason=reason)
    return True


def _reservation_units_back(*, activity_id: int, entry: LogEntry, reason: str) -> bool:
    """The Redis half of a give-up (once: the release acts only while the entry is in the
    log): its units go back on sale, unless the database has none for it. A shopper who
    holds a live order stays a participant, recorded under that order's reservation (so
    cancelling it frees them); anyone else may try again."""
    live_shard, live = (
        Order.objects.filter(activity_id=activity_id, user_id=entry.user_id, status__in=Order.LIVE_STATUSES)
        .values_list("shard", "reservation_id")
        .first()
    ) or (0, "")
    return reservation_release(
        activity_id=activity_id,
        entry=entry,
        free_participant=not live,
        reason=reason,
        live_reservation_id=live,
        live_shard=live_shard,
        units_back=reason != _NO_SUCH_UNITS,
    )


def _reservations_given_up(*, activity_id: int, entries) -> dict[tuple[int, str], str]:
    """(shard, reservation id) → reason, of those of ``entries`` (log entries or orders) given up."""
    keys = {(e.shard, e.reservation_id) for e in entries}
    if not keys:
        return {}
    # Every batch asks (after its stock lock): one array parameter and no ORM compilation,
    # rather than an IN list of a hundred placeholders.
    with prepared_cursor() as cursor:
        cursor.execute(
            f"SELECT shard, reservation_id, reason FROM {ReleasedReservation._meta.db_table}"
            " WHERE activity_id = %s AND reservation_id = ANY(%s::varchar[])",
            [activity_id, [rid for _, rid in keys]],
        )
        return {(shard, rid): reason for shard, rid, reason in cursor.fetchall() if (shard, rid) in keys}


class _GivenUpMeanwhile(Exception):
    """Some reservations of the batch were given up while it was being inserted."""

    def __init__(self, keys: dict[tuple[int, str], str]):
        super().__init__(f"{len(keys)} reservation(s) given up meanwhile")
        self.keys = keys  # → the reason recorded


def _reservation_refuse(*, activity_id: int, entry: LogEntry, kind: str) -> bool:
    """A reservation the database will not honour: its units go back to Redis, and staff
    get an anomaly. Released first, so a failing anomaly insert cannot keep the stock.
    False when the reservation turned out to have an order (a concurrent consumer)."""
    if not reservation_give_up(activity_id=activity_id, entry=entry, reason=_REFUSAL_REASONS[kind]):
        return False
    anomaly_open(
        kind=kind,
        activity_id=activity_id,
        entry=entry,
        details={
            "quantity": entry.quantity,
            "shard": entry.shard,
            "action": "reservation released; its units left Redis"
            if _REFUSAL_REASONS[kind] == _NO_SUCH_UNITS
            else "Redis reservation returned",
        },
    )
    return True


def orders_create_from_reservations(*, activity_id: int, entries: list[LogEntry]) -> BatchOutcome:
    """Turn reservations into orders in one transaction, with the database stock guard.

    Idempotent: a reservation that already has an order counts as done. A reservation
    the database cannot honour (no stock, or the shopper already holds a live order)
    is released in Redis and recorded as an anomaly. A reservation given up before
    (``reservation_give_up``) never becomes an order: its units are on sale again.
    """
    outcome = BatchOutcome()
    if not entries:
        return outcome
    # A consistent order of inserts keeps two concurrent batches from deadlocking.
    entries = sorted(entries, key=lambda e: (e.shard, e.reservation_id))
    try:
        with transaction.atomic():
            inserted = _insert_orders_deducting(activity_id=activity_id, entries=entries, share=Share.REDIS)
            # Read after the stock row's lock (taken by the deduction): a give-up committed
            # before it is visible now, and one still to come waits for this commit.
            given_up = _reservations_given_up(activity_id=activity_id, entries=inserted)
            if given_up:
                raise _GivenUpMeanwhile(given_up)
    except _GivenUpMeanwhile as exc:
        # Rare (a late or duplicate task): the batch again without them.
        for entry in entries:
            if (entry.shard, entry.reservation_id) in exc.keys:
                reason = exc.keys[(entry.shard, entry.reservation_id)]
                _reservation_units_back(activity_id=activity_id, entry=entry, reason=reason)
                outcome.released.append(entry.reservation_id)
        rest = [e for e in entries if (e.shard, e.reservation_id) not in exc.keys]
        outcome.add(orders_create_from_reservations(activity_id=activity_id, entries=rest))
        return outcome
    except InsufficientStock:
        if len(entries) > 1:
            # Find the reservations the database cannot honour, one at a time.
            for entry in entries:
                outcome.add(orders_create_from_reservations(activity_id=activity_id, entries=[entry]))
            return outcome
        (entry,) = entries
        if _reservation_refuse(activity_id=activity_id, entry=entry, kind=AnomalyOrder.Kind.DB_GUARD_FAILED):
            outcome.released.append(entry.reservation_id)
            return outcome
        outcome.already_done.append(entry.reservation_id)  # a concurrent consumer made its order
        reservations_acknowledge_entries(activity_id=activity_id, entries=[entry])
        return outcome

    outcome.created = [o.reservation_id for o in inserted]
    if inserted:
        orders_expiry_schedule(orders=inserted)
    # (shard, id): log ids are unique per shard only.
    done = {(o.shard, o.reservation_id) for o in inserted}
    skipped = [e for e in entries if (e.shard, e.reservation_id) not in done]
    if skipped and not inserted and not Activity.objects.filter(pk=activity_id).exists():
        # Nothing to order against: not a duplicate, so no reservation is released.
        raise Activity.DoesNotExist(f"activity {activity_id} does not exist")
    if skipped:
        ordered = set(
            Order.objects.filter(
                activity_id=activity_id, reservation_id__in=[e.reservation_id for e in skipped]
            ).values_list("shard", "reservation_id")
        )
        given_up = _reservations_given_up(activity_id=activity_id, entries=skipped)
        for entry in skipped:
            key = (entry.shard, entry.reservation_id)
            if key in ordered:
                outcome.already_done.append(entry.reservation_id)
                done.add(key)
            elif key in given_up:  # given up before; its Redis release may not have finished
                _reservation_units_back(activity_id=activity_id, entry=entry, reason=given_up[key])
                outcome.released.append(entry.reservation_id)
            elif _reservation_refuse(
                # The shopper already holds a live order: Redis let a second reservation
                # through (e.g. participants lost in a restart). The constraint said no.
                activity_id=activity_id,
                entry=entry,
                kind=AnomalyOrder.Kind.DUPLICATE_RESERVATION,
            ):
                outcome.released.append(entry.reservation_id)
            else:
                outcome.already_done.append(entry.reservation_id)
                done.add(key)
    reservations_acknowledge_entries(
        activity_id=activity_id, entries=[e for e in entries if (e.shard, e.reservation_id) in done]
    )
    return outcome


# --- the database path (Redis away) ---------------------------------------------


class OrderDuplicate(Exception):
    """The shopper already holds a live order for the activity."""


def order_create_direct(*, activity_id: int, user_id: int, quantity: int) -> NewOrder:
    """A purchase on the database alone: the order insert and the conditional update of
    the reserve in one transaction, the same two steps the consumer runs. Only the
    reserve is sold this way: Redis never holds it.

    Raises InsufficientStock (the reserve cannot cover it) or OrderDuplicate; nothing is
    written then.
    """
    entry = LogEntry(f"{DB_PATH_PREFIX}{uuid.uuid4().hex[:20]}", user_id, quantity, 0)
    with transaction.atomic():
        inserted = _insert_orders_deducting(
            activity_id=activity_id, entries=[entry], share=Share.RESERVE, reason="order_created_db_path"
        )
        if not inserted:
            raise OrderDuplicate(f"user {user_id} already holds a live order for activity {activity_id}")
    return inserted[0]


# --- pay and cancel -------------------------------------------------------------
# --- pay, cancel and the payment deadline -----------------------------------------
# Every transition is a conditional UPDATE on the current status, so a payment and a
# timeout arriving together end in exactly one outcome, and stock moves exactly once.

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
    """Give cancelled orders' units back to Redis (each to its shard) and free the
    shoppers; returns how many went back now. An ended activity has no Redis state left
    to return to: the database is the truth then."""
    live = set(
        Activity.objects.filter(pk__in={o.activity_id for o in orders})
        .exclude(status=Activity.Status.ENDED)
        .values_list("pk", flat=True)
    )
    return sum(order_units_return_safely(order=o) for o in orders if o.activity_id in live)


def order_units_return_safely(*, order: Order) -> bool:
    """The one place a cancelled order's units go back to Redis: ``order`` carries the
    shard the units came from. A database-path order's units never were in Redis: the
    cancel released them to Redis's share in the database (``stock_return``), and the
    hand-over adds them to Redis's stock; its shopper is freed."""
    try:
        if order.from_reserve:
            freed = order_participant_free(
                activity_id=order.activity_id, user_id=order.user_id, reservation_id=order.reservation_id
            )
            return released_units_hand_over(activity_id=order.activity_id) > 0 or freed
        return order_units_return(
            activity_id=order.activity_id,
            order_no=order.order_no,
            quantity=order.quantity,
            user_id=order.user_id,
            reservation_id=order.reservation_id,
            shard=order.shard,
        )
    except Exception as exc:  # Redis away: reconciliation finds the cancelled order not yet returned
        logger.warning("cancel: Redis return of %s deferred to reconciliation: %s", order.order_no, exc)
        return False


# The (activity, deadline second) this process last asked the Redis flag about: the
# batches that follow in the same second need not ask again. One entry, so bounded.
_expiry_asked: tuple[int, int] | None = None


@register_reset
def _expiry_asked_forget() -> None:
    global _expiry_asked
    _expiry_asked = None


def orders_expiry_schedule(*, orders: Sequence[NewOrder]) -> None:
    """After the commit that created them, make sure a deadline task is scheduled for
    every order: one task per activity and second of deadline, shared by all orders due
    in that second (a sale creates thousands of orders a second; an eta message each
    would sit in the workers' memory until it runs). A Redis flag (SET NX) tells whether
    that second has its task; a process that asked about a second already does not ask
    again (a batch's orders share their deadline second, and a flood makes tens of
    batches a second). If the broker is away the sweeper cancels them instead."""
    from .tasks import orders_expire_task

    due = sorted({(o.activity_id, math.ceil(o.pay_deadline.timestamp())) for o in orders})
    due = [d for d in due if d != _expiry_asked]
    if not due:
        return

    def schedule() -> None:
        global _expiry_asked
        for activity_id, second in due:
            _expiry_asked = (activity_id, second)
            try:
                if orders_expiry_claim(activity_id=activity_id, due_second=second):
                    orders_expire_task.apply_async(
                        args=[activity_id, second], eta=datetime.fromtimestamp(second, tz=UTC)
                    )
            except Exception as exc:  # any broker failure; the sweeper is the safety net
                logger.warning("deadline task of activity %s not scheduled, the sweeper will act: %s", activity_id, exc)

    transaction.on_commit(schedule, robust=True)


def orders_expiry_claim(*, activity_id: int, due_second: int) -> bool:
    """True for the first caller of this activity and second (who schedules the task);
    True as well when Redis cannot say: a second task is harmless, a missing one is not."""
    ttl = max(60, int(due_second - time.time()) + 600)
    try:
        return bool(stock_redis().set(ActivityKeys(activity_id).expiry_scheduled(due_second), 1, nx=True, ex=ttl))
    except redis.RedisError:
        return True


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


# --- staff actions on anomalies ------------------------------------------------------


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
            result = f"resolved with the drift still measured: {remaining}"
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
    activity = Activity.objects.get(pk=anomaly.activity_id)
    quantity = int(anomaly.details.get("quantity") or (anomaly.order.quantity if anomaly.order else 1))
    if activity.status != Activity.Status.ENDED:
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
    from .selectors import reservation_entry

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


# --- the shipping address ---------------------------------------------------------------


class AddressRequired(Exception):
    """The shopper has no shipping address yet: it is asked for before payment."""


def address_save(*, user_id: int, fields: dict[str, str]) -> ShippingAddress:
    """Create or replace the shopper's address. Raises django's ValidationError (per field)
    for anything the model refuses: lengths, control characters, phone, postal code."""
    address = ShippingAddress.objects.filter(user_id=user_id).first() or ShippingAddress(user_id=user_id)
    for name in ShippingAddress.SNAPSHOT_FIELDS:
        setattr(address, name, fields.get(name, ""))
    address.full_clean(exclude=["user"])
    address.save()
    return address


def order_address_attach(*, order: Order) -> Order:
    """Copy the shopper's current address onto a pending order (each payment attempt takes
    the address as it is then); a paid or cancelled order keeps the copy it has."""
    if order.status != Order.Status.PENDING:
        return order
    address = ShippingAddress.objects.filter(user_id=order.user_id).first()
    if address is None:
        raise AddressRequired("Add a shipping address before paying.")
    snapshot = address.snapshot()
    Order.objects.filter(pk=order.pk, status=Order.Status.PENDING).update(shipping_address=snapshot)
    order.shipping_address = snapshot
    return order
