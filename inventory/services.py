"""Every write to ``SeckillStock`` and its ledger lives here; callers never touch stock rows.

Arithmetic is a conditional UPDATE with ``F()`` expressions: zero rows updated means
the stock is really gone, and nothing was written.
"""

from collections.abc import Iterable, Sequence

from django.db import transaction
from django.db.models import F

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


def _ledger_write(*, activity_id: int, orders: Iterable, kind: str, reason: str) -> None:
    """One ledger row per order: every change of ``available`` is explained."""
    StockMovement.objects.bulk_create(
        StockMovement(activity_id=activity_id, order_id=o.pk, kind=kind, quantity=o.quantity, reason=reason)
        for o in orders
    )
