"""Every write to ``SeckillStock`` and its ledger lives here; callers never touch stock rows.

Arithmetic is a conditional UPDATE (``available >= q``, ``version + 1``) in the database:
zero rows updated means the stock is really gone, and nothing was written. Deductions
and returns write the UPDATE and their ledger rows in one statement (``_stock_move``).
"""

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from .models import SeckillStock, StockMovement


class InsufficientStock(Exception):
    """The database guard found fewer units than asked for; nothing was written."""


def stock_create(*, activity_id: int, total: int) -> SeckillStock:
    return SeckillStock.objects.create(activity_id=activity_id, total=total, available=total)


def stock_set_total(*, activity_id: int, total: int) -> None:
    """Change the total of an activity that has sold nothing yet."""
    updated = SeckillStock.objects.filter(activity_id=activity_id, available=F("total")).update(
        total=total, available=total, version=F("version") + 1
    )
    if not updated:
        raise InsufficientStock("the total can only change before any unit is sold")


def stock_lock(*, activity_id: int) -> None:
    """Hold the activity's stock row until the transaction ends. Every order creation
    takes it as well (``stock_deduct``), so whatever the holder reads next is ordered
    against them: an order committed before is visible, one in progress waits."""
    assert transaction.get_connection().in_atomic_block, "a row lock lasts only as long as its transaction"
    list(SeckillStock.objects.select_for_update().filter(activity_id=activity_id).values_list("pk", flat=True))


def stock_deduct(*, activity_id: int, orders: Sequence, reason: str = "order_created", keep: int = 0) -> None:
    """Take the units of ``orders`` (already inserted, same transaction) from the stock,
    leaving at least ``keep`` units (the database path keeps the safety stock).

    Raises InsufficientStock, having written nothing, when the guard fails.
    """
    units = sum(o.quantity for o in orders)
    if units <= 0:
        return
    assert transaction.get_connection().in_atomic_block, "deduct together with the order insert"
    if not _stock_move(
        activity_id=activity_id,
        orders=orders,
        delta=-units,
        guard="available >= %(bound)s",
        bound=units + keep,
        kind=StockMovement.Kind.DEDUCT,
        reason=reason,
    ):
        raise InsufficientStock(f"activity {activity_id}: fewer than {units} units available")


def stock_return(*, activity_id: int, orders: Iterable, reason: str) -> None:
    """Put the units of ``orders`` (just cancelled, same transaction) back."""
    orders = list(orders)
    units = sum(o.quantity for o in orders)
    if units <= 0:
        return
    assert transaction.get_connection().in_atomic_block, "return together with the status change"
    if not _stock_move(
        activity_id=activity_id,
        orders=orders,
        delta=units,
        guard="available <= total - %(bound)s",
        bound=units,
        kind=StockMovement.Kind.RETURN,
        reason=reason,
    ):
        raise InsufficientStock(f"activity {activity_id}: returning {units} units would exceed the total")


# The conditional UPDATE and the ledger rows in one statement: when the guard matches
# no row, no ledger row is written either. A batch costs one round trip, and no model
# instance or ORM compilation per call; the rows travel as arrays.
_STOCK_MOVE_SQL = """
WITH moved AS (
    UPDATE {stock} SET available = available + %(delta)s, version = version + 1
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
    *, activity_id: int, orders: Iterable, delta: int, guard: str, bound: int, kind: str, reason: str
) -> bool:
    """Change ``available`` by ``delta`` where ``guard`` holds, and write one ledger row per
    order (every change of ``available`` is explained). False, nothing written, when the
    guard failed."""
    order_ids, quantities = [], []
    for o in orders:
        order_ids.append(o.pk)
        quantities.append(o.quantity)
    sql = _STOCK_MOVE_SQL.format(stock=SeckillStock._meta.db_table, ledger=StockMovement._meta.db_table, guard=guard)
    params: dict[str, Any] = {
        "delta": delta,
        "activity_id": activity_id,
        "bound": bound,
        "kind": kind,
        "reason": reason,
        "now": timezone.now(),
        "order_ids": order_ids,
        "quantities": quantities,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount > 0
