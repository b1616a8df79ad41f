"""Order creation: reservations become orders (the consumer's batch insert with the
database stock guard), a reservation given up for good instead, the database path's
order (Redis away), and the payment deadline each new order gets scheduled."""

import logging
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import redis
from django.db import transaction
from django.utils import timezone

from core.memory import register_reset
from inventory.services import InsufficientStock, Share, prepared_cursor, stock_deduct_inserting, stock_lock
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservation_release, reservations_acknowledge_entries
from stock.scripts import LogEntry

from ..mails import order_mails_enqueue
from ..models import DB_PATH_PREFIX, AnomalyOrder, Order, ReleasedReservation, activity_model
from .anomalies import anomaly_open

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
    sql = _INSERT_ORDERS_SQL.format(orders=Order._meta.db_table, activities=activity_model()._meta.db_table)
    with prepared_cursor() as cursor:
        cursor.execute(sql, _insert_params(activity_id, entries))
        return _new_orders(activity_id, cursor.fetchall())


def _insert_orders_deducting(
    *, activity_id: int, entries: list[LogEntry], share: Share, reason: str = "order_created"
) -> list[NewOrder]:
    """``_insert_orders`` and the deduction of the inserted rows' units from ``share``
    with their ledger rows, in one statement. Raises InsufficientStock (leave the
    transaction: the rows were inserted) when the share lacks their units."""
    sql = _INSERT_ORDERS_SQL.format(orders=Order._meta.db_table, activities=activity_model()._meta.db_table)
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
        return _batch_without_given_up(activity_id=activity_id, entries=entries, given_up=exc.keys)
    except InsufficientStock:
        return _batch_short_of_stock(activity_id=activity_id, entries=entries)

    outcome.created = [o.reservation_id for o in inserted]
    if inserted:
        orders_expiry_schedule(orders=inserted)
        order_mails_enqueue(kind="won", order_ids=[o.pk for o in inserted])
    # (shard, id): log ids are unique per shard only.
    done = {(o.shard, o.reservation_id) for o in inserted}
    skipped = [e for e in entries if (e.shard, e.reservation_id) not in done]
    if skipped and not inserted and not activity_model().objects.filter(pk=activity_id).exists():
        # Nothing to order against: not a duplicate, so no reservation is released.
        raise activity_model().DoesNotExist(f"activity {activity_id} does not exist")
    if skipped:
        settled, settled_done = _skipped_settle(activity_id=activity_id, skipped=skipped)
        outcome.add(settled)
        done |= settled_done
    reservations_acknowledge_entries(
        activity_id=activity_id, entries=[e for e in entries if (e.shard, e.reservation_id) in done]
    )
    return outcome


def _batch_without_given_up(
    *, activity_id: int, entries: list[LogEntry], given_up: dict[tuple[int, str], str]
) -> BatchOutcome:
    """Rare (a late or duplicate task): reservations of the batch given up while it was
    being inserted. Their units go back, and the batch runs again without them."""
    outcome = BatchOutcome()
    for entry in entries:
        if (entry.shard, entry.reservation_id) in given_up:
            reason = given_up[(entry.shard, entry.reservation_id)]
            _reservation_units_back(activity_id=activity_id, entry=entry, reason=reason)
            outcome.released.append(entry.reservation_id)
    rest = [e for e in entries if (e.shard, e.reservation_id) not in given_up]
    outcome.add(orders_create_from_reservations(activity_id=activity_id, entries=rest))
    return outcome


def _batch_short_of_stock(*, activity_id: int, entries: list[LogEntry]) -> BatchOutcome:
    """The database stock cannot cover the batch: a batch is tried again one reservation
    at a time; a single reservation is refused (released, anomaly opened)."""
    outcome = BatchOutcome()
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


def _skipped_settle(*, activity_id: int, skipped: list[LogEntry]) -> tuple[BatchOutcome, set[tuple[int, str]]]:
    """The reservations the insert skipped: ordered before, given up before (their units
    go back), or a second one of a shopper who holds a live order (refused). Returns
    their outcome and the (shard, id) of those that count as done."""
    outcome, done = BatchOutcome(), set()
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
    return outcome, done


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
        order_mails_enqueue(kind="won", order_ids=[inserted[0].pk])
    return inserted[0]


# --- the payment deadline, scheduled with the orders ----------------------------------

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
    from ..tasks import orders_expire_task

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
