"""Every write to ``SeckillStock`` and its ledger lives here; callers never touch stock rows.

Arithmetic is a conditional UPDATE with ``F()`` expressions: zero rows updated means
the stock is really gone, and nothing was written.
"""

from collections.abc import Iterable, Sequence

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


def stock_deduct(*, activity_id: int, orders: Sequence, reason: str = "order_created", keep: int = 0) -> None:
    """Take the units of ``orders`` (already inserted, same transaction) from the stock,
    leaving at least ``keep`` units (the database path keeps the safety stock).

    Raises InsufficientStock before writing anything when the guard fails.
    """
    units = sum(o.quantity for o in orders)
    if units <= 0:
        return
    assert transaction.get_connection().in_atomic_block, "deduct together with the order insert"
    updated = SeckillStock.objects.filter(activity_id=activity_id, available__gte=units + keep).update(
        available=F("available") - units, version=F("version") + 1
    )
    if not updated:
        raise InsufficientStock(f"activity {activity_id}: fewer than {units} units available")
    _ledger_write(activity_id=activity_id, orders=orders, kind=StockMovement.Kind.DEDUCT, reason=reason)


def stock_return(*, activity_id: int, orders: Iterable, reason: str) -> None:
    """Put the units of ``orders`` (just cancelled, same transaction) back."""
    orders = list(orders)
    units = sum(o.quantity for o in orders)
    if units <= 0:
        return
    assert transaction.get_connection().in_atomic_block, "return together with the status change"
    updated = SeckillStock.objects.filter(activity_id=activity_id, available__lte=F("total") - units).update(
        available=F("available") + units, version=F("version") + 1
    )
    if not updated:
        raise InsufficientStock(f"activity {activity_id}: returning {units} units would exceed the total")
    _ledger_write(activity_id=activity_id, orders=orders, kind=StockMovement.Kind.RETURN, reason=reason)


# The ledger rows of a batch in one statement of fixed text (orders and quantities as
# arrays): no model instance per row.
_LEDGER_SQL = """
INSERT INTO {table} (activity_id, order_id, kind, quantity, reason, created_at)
SELECT %s, m.order_id, %s, m.quantity, %s, %s
FROM unnest(%s::bigint[], %s::integer[]) WITH ORDINALITY AS m(order_id, quantity, position)
ORDER BY m.position
"""


def _ledger_write(*, activity_id: int, orders: Iterable, kind: str, reason: str) -> None:
    """One ledger row per order: every change of ``available`` is explained."""
    order_ids, quantities = [], []
    for o in orders:
        order_ids.append(o.pk)
        quantities.append(o.quantity)
    with connection.cursor() as cursor:
        cursor.execute(
            _LEDGER_SQL.format(table=StockMovement._meta.db_table),
            [activity_id, kind, reason, timezone.now(), order_ids, quantities],
        )
