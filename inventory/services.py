"""Every write to ``SeckillStock`` and its ledger lives here; callers never touch stock rows.

Arithmetic is a conditional UPDATE (``version + 1``) in the database: zero rows updated
means the stock is really gone, and nothing was written. Deductions and returns write the
UPDATE and their ledger rows in one statement (``_stock_move``); the consumer's deduction
is in the statement that inserts the orders as well (``stock_deduct_inserting``).

Two shares, one owner per unit (escrow): Redis's share is ``available - reserve`` and
only orders of Redis reservations take from it; the reserve is sold only by the database
path (Redis away) and never loaded into Redis. Each move names its share, and its guard
keeps that share from going below zero, so neither path can sell the other's unit.
"""

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from typing import Any, NamedTuple

import psycopg
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


def stock_reserve_release(*, activity_id: int) -> int:
    """Hand what is left of the reserve to Redis's share (Redis's share could not cover a
    purchase: the reserve would otherwise stay unsold). Returns the units ever released to
    Redis's share (the figure ``StockLayout.handover`` brings Redis up to). A database-path
    sale at the same moment is ordered by the row lock: it took its unit before, or finds
    the reserve empty. The reserve never grows again (``stock_return``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {SeckillStock._meta.db_table} SET released = released + reserve, reserve = 0,"
            " version = version + 1 WHERE activity_id = %s AND reserve > 0 RETURNING released",
            [activity_id],
        )
        row = cursor.fetchone()
    if row is not None:
        return int(row[0])
    return SeckillStock.objects.filter(activity_id=activity_id).values_list("released", flat=True).first() or 0


class _PreparedCursor(psycopg.Cursor):
    """Parameters bound by the server, and every statement prepared on its first use, with
    binary parameters and results (psycopg's C loaders, no text parsing of timestamps)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        result = super().execute(query, params, prepare=True, binary=True)
        # psycopg keeps no query text for a prepared statement, and Django's query log
        # (DEBUG, CaptureQueriesContext) reads it there: show it the text with its placeholders.
        self._query = _LoggedQuery(query.encode() if isinstance(query, str) else query)  # type: ignore[assignment]
        return result


class _LoggedQuery(NamedTuple):
    query: bytes


# Django turns psycopg's automatic preparing off (prepare_threshold None), which also
# refuses prepare=True. Its own cursors bind on the client and never prepare, so a
# threshold no statement reaches only lets _PreparedCursor's statements be prepared.
_NEVER_BY_COUNT = 1 << 30


@contextmanager
def prepared_cursor() -> Iterator[Any]:
    """A cursor for fixed-text statements run again and again (the order pipeline's, once
    per batch; the purchase's token lookup): PostgreSQL parses each once per connection, and the arrays travel as binary
    parameters instead of literals in a text it would parse every time. It goes through
    Django's wrappers (errors as django.db exceptions, execute wrappers, query logging).
    A rollback makes psycopg forget its prepared statements; they are prepared again."""
    connection.ensure_connection()
    raw_connection = connection.connection
    if raw_connection.prepare_threshold is None:
        raw_connection.prepare_threshold = _NEVER_BY_COUNT
    with connection._prepare_cursor(_PreparedCursor(raw_connection)) as cursor:  # type: ignore[attr-defined]
        yield cursor


# What each share's deduction guards and how it moves the reserve (``{units}`` > 0).
_DEDUCT = {
    Share.REDIS: ("available - reserve >= {units}", "reserve"),
    Share.RESERVE: ("reserve >= {units}", "reserve - {units}"),
}

# The order rows' INSERT, the conditional UPDATE and the ledger rows in one statement.
# The first column says whether the guard held: when it did not, the rows were inserted
# all the same, and the caller's transaction must roll back (stock_deduct_inserting).
_DEDUCT_INSERTING_SQL = """
WITH inserted AS (
{insert}
), total AS (
    SELECT coalesce(sum(quantity), 0) AS n FROM inserted
), moved AS (
    UPDATE {stock} SET available = available - total.n, reserve = {reserve}, version = version + 1
    FROM total
    WHERE activity_id = %(stock_activity_id)s AND total.n > 0 AND {guard}
    RETURNING activity_id
), ledger AS (
    INSERT INTO {ledger} (activity_id, order_id, kind, quantity, reason, created_at)
    SELECT moved.activity_id, inserted.id, %(stock_kind)s, inserted.quantity, %(stock_reason)s, %(stock_now)s
    FROM moved, inserted
    ORDER BY inserted.id
)
SELECT EXISTS (SELECT FROM moved), inserted.* FROM inserted ORDER BY inserted.id
"""


def stock_deduct_inserting(
    *, activity_id: int, insert_sql: str, params: dict[str, Any], share: Share, reason: str = "order_created"
) -> list[tuple]:
    """Insert order rows and take their units from ``share`` with one ledger row each, in
    one statement (one round trip for the whole batch). ``insert_sql`` is an ``INSERT …
    RETURNING`` whose returned columns include ``id`` and ``quantity``, with ``params``
    (names not starting with ``stock_``). Returns the rows it returned, ordered by id.

    Raises InsufficientStock when the share lacks their units: no unit moved and no ledger
    row was written, but the rows were inserted, so the exception must leave the caller's
    ``transaction.atomic()`` (which rolls them back)."""
    assert transaction.get_connection().in_atomic_block, "the insert and the deduction roll back together"
    guard, reserve = _DEDUCT[share]
    sql = _DEDUCT_INSERTING_SQL.format(
        insert=insert_sql.strip(),
        stock=SeckillStock._meta.db_table,
        ledger=StockMovement._meta.db_table,
        guard=guard.format(units="total.n"),
        reserve=reserve.format(units="total.n"),
    )
    params = {
        **params,
        "stock_activity_id": activity_id,
        "stock_kind": StockMovement.Kind.DEDUCT,
        "stock_reason": reason,
        "stock_now": timezone.now(),
    }
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if rows and not rows[0][0]:
        raise InsufficientStock(
            f"activity {activity_id}: too few units for {len(rows)} orders in the {share.value} share"
        )
    return [row[1:] for row in rows]


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
        reserve=reserve.format(units="%(units)s"),
        guard=guard.format(units="%(units)s"),
        kind=StockMovement.Kind.DEDUCT,
        reason=reason,
    ):
        raise InsufficientStock(f"activity {activity_id}: fewer than {units} units in the {share.value} share")


def stock_return(*, activity_id: int, orders: Iterable, share: Share, reason: str) -> None:
    """Put the units of ``orders`` (just cancelled, same transaction) back on sale: those
    of Redis's share back into it; those the database path sold from the reserve into
    Redis's share too, counted as released to it (``released``), for
    ``StockLayout.handover`` to add to Redis after the commit. The reserve itself never
    grows once a sale is warmed, so the reserve Redis counts can never be below it."""
    orders = list(orders)
    units = sum(o.quantity for o in orders)
    if units <= 0:
        return
    assert transaction.get_connection().in_atomic_block, "return together with the status change"
    if not _stock_move(
        activity_id=activity_id,
        orders=orders,
        delta=units,
        reserve="reserve",
        released="released + %(units)s" if share is Share.RESERVE else "released",
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
    UPDATE {stock} SET available = available + %(delta)s, reserve = {reserve}, released = {released},
        version = version + 1
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
    *,
    activity_id: int,
    orders: Iterable,
    delta: int,
    reserve: str,
    guard: str,
    kind: str,
    reason: str,
    released: str = "released",
) -> bool:
    """Change ``available`` by ``delta`` and ``reserve`` and ``released`` as given where ``guard`` holds, and
    write one ledger row per order (every change of ``available`` is explained). False,
    nothing written, when the guard failed."""
    order_ids, quantities = [], []
    for o in orders:
        order_ids.append(o.pk)
        quantities.append(o.quantity)
    sql = _STOCK_MOVE_SQL.format(
        stock=SeckillStock._meta.db_table,
        ledger=StockMovement._meta.db_table,
        guard=guard,
        reserve=reserve,
        released=released,
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
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount > 0
