"""Every write to ``SeckillStock`` and its ledger lives here; callers never touch stock rows.

Arithmetic is a conditional UPDATE (``version + 1``) in the database: zero rows updated
means the stock is really gone, and nothing was written. Deductions and returns write the
UPDATE and their ledger rows in one statement (``_stock_move``).

Two shares, one owner per unit (escrow): Redis's share is ``available - reserve`` and
only orders of Redis reservations take from it; the reserve is sold only by the database
path (Redis away) and never loaded into Redis. Each move names its share, and its guard
keeps that share from going below zero, so neither path can sell the other's unit.
"""

from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from .models import SeckillStock, StockMovement


class InsufficientStock(Exception):
    """The database guard found fewer units than asked for; nothing was written."""


class Share(Enum):
    """Whose units a move takes or gives back."""

    REDIS = "redis"  # ``available - reserve``: orders of Redis reservations
    RESERVE = "reserve"  # ``reserve``: the database path's sales


def stock_create(*, activity_id: int, total: int, reserve: int = 0) -> SeckillStock:
    return SeckillStock.objects.create(activity_id=activity_id, total=total, available=total, reserve=reserve)


def stock_set_total(*, activity_id: int, total: int, reserve: int = 0) -> None:
    """Change the total (and the reserve) of an activity that has sold nothing yet."""
    updated = SeckillStock.objects.filter(activity_id=activity_id, available=F("total")).update(
        total=total, available=total, reserve=reserve, version=F("version") + 1
    )
    if not updated:
        raise InsufficientStock("the total can only change before any unit is sold")


def stock_lock(*, activity_id: int) -> None:
    """Hold the activity's stock row until the transaction ends. Every order creation
    takes it as well (``stock_deduct``), so whatever the holder reads next is ordered
    against them: an order committed before is visible, one in progress waits."""
    assert transaction.get_connection().in_atomic_block, "a row lock lasts only as long as its transaction"
    list(SeckillStock.objects.select_for_update().filter(activity_id=activity_id).values_list("pk", flat=True))


def stock_reserve_release(*, activity_id: int) -> int | None:
    """Hand what is left of the reserve to Redis's share (Redis's share sold out: the
    reserve would otherwise stay unsold). Returns the units ever released (the figure to
    bring Redis's ``loaded`` up by), or None when there was nothing to release. A
    database-path sale at the same moment is ordered by the row lock: it took its unit
    before, or finds the reserve empty."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {SeckillStock._meta.db_table} SET released = released + reserve, reserve = 0,"
            " version = version + 1 WHERE activity_id = %s AND reserve > 0 RETURNING released",
            [activity_id],
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


# What each share's deduction guards and how it moves the reserve (``%(units)s`` > 0).
_DEDUCT = {
    Share.REDIS: ("available - reserve >= %(units)s", "reserve"),
    Share.RESERVE: ("reserve >= %(units)s", "reserve - %(units)s"),
}


def stock_deduct(*, activity_id: int, orders: Sequence, share: Share, reason: str = "order_created") -> None:
    """Take the units of ``orders`` (already inserted, same transaction) from ``share``.

    Raises InsufficientStock, having written nothing, when the share lacks them.
    """
    units = sum(o.quantity for o in orders)
    if units <= 0:
        return
    assert transaction.get_connection().in_atomic_block, "deduct together with the order insert"
    guard, reserve = _DEDUCT[share]
    if not _stock_move(
        activity_id=activity_id,
        orders=orders,
        delta=-units,
        reserve=reserve,
        guard=guard,
        kind=StockMovement.Kind.DEDUCT,
        reason=reason,
    ):
        raise InsufficientStock(f"activity {activity_id}: fewer than {units} units in the {share.value} share")


def stock_return(*, activity_id: int, orders: Iterable, share: Share, reason: str) -> None:
    """Put the units of ``orders`` (just cancelled, same transaction) back into the share
    they were sold from."""
    orders = list(orders)
    units = sum(o.quantity for o in orders)
    if units <= 0:
        return
    assert transaction.get_connection().in_atomic_block, "return together with the status change"
    if not _stock_move(
        activity_id=activity_id,
        orders=orders,
        delta=units,
        reserve="reserve + %(units)s" if share is Share.RESERVE else "reserve",
        guard="available <= total - %(units)s",
        kind=StockMovement.Kind.RETURN,
        reason=reason,
    ):
        raise InsufficientStock(f"activity {activity_id}: returning {units} units would exceed the total")


# The conditional UPDATE and the ledger rows in one statement: when the guard matches
# no row, no ledger row is written either. A batch costs one round trip, and no model
# instance or ORM compilation per call; the rows travel as arrays.
_STOCK_MOVE_SQL = """
WITH moved AS (
    UPDATE {stock} SET available = available + %(delta)s, reserve = {reserve}, version = version + 1
    WHERE activity_id = %(activity_id)s AND {guard}
    RETURNING activity_id
)
INSERT INTO {ledger} (activity_id, order_id, kind, quantity, reason, created_at)
SELECT moved.activity_id, m.order_id, %(kind)s, m.quantity, %(reason)s, %(now)s
FROM moved, unnest(%(order_ids)s::bigint[], %(quantities)s::integer[])
     WITH ORDINALITY AS m(order_id, quantity, position)
ORDER BY m.position
"""


def _stock_move(
    *, activity_id: int, orders: Iterable, delta: int, reserve: str, guard: str, kind: str, reason: str
) -> bool:
    """Change ``available`` by ``delta`` and ``reserve`` as given where ``guard`` holds, and
    write one ledger row per order (every change of ``available`` is explained). False,
    nothing written, when the guard failed."""
    order_ids, quantities = [], []
    for o in orders:
        order_ids.append(o.pk)
        quantities.append(o.quantity)
    sql = _STOCK_MOVE_SQL.format(
        stock=SeckillStock._meta.db_table, ledger=StockMovement._meta.db_table, guard=guard, reserve=reserve
    )
    params: dict[str, Any] = {
        "delta": delta,
        "activity_id": activity_id,
        "units": abs(delta),
        "kind": kind,
        "reason": reason,
        "now": timezone.now(),
        "order_ids": order_ids,
        "quantities": quantities,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount > 0
