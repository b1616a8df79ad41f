"""The naive purchase, for contrast only: every purchase is a database transaction.

No Redis: an order insert and the conditional stock UPDATE (``inventory.services.stock_deduct``,
the one home of stock writes) commit together, so PostgreSQL's row lock on the stock row
serialises every buyer. Mounted only by ``SECKILL_BENCH_VIEWS`` (see bench/urls.py); the
shop itself never takes this path.
"""

from uuid import uuid4

from django.db import transaction

from core.errors import ApiError
from inventory.services import InsufficientStock, Share, stock_deduct
from orders.services.creation import NewOrder, _insert_orders
from seckill.sale.snapshot import ActivitySnapshot
from stock.scripts import LogEntry


def naive_purchase(*, activity: ActivitySnapshot, user_id: int, quantity: int) -> NewOrder:
    """Insert the order and take the stock in one transaction; 409 / 410 like the real path."""
    entry = LogEntry(reservation_id=f"db{uuid4().hex[:20]}", user_id=user_id, quantity=quantity, shard=0)
    try:
        with transaction.atomic():
            # The same INSERT … ON CONFLICT DO NOTHING the order consumer uses (price and
            # deadline read from the activity's row in it): a shopper with a live order
            # already gets no row back.
            inserted = _insert_orders(activity_id=activity.id, entries=[entry])
            if not inserted:
                raise ApiError(409, "duplicate", "You have already taken part in this sale.")
            stock_deduct(activity_id=activity.id, orders=inserted, share=Share.REDIS)  # the whole stock: no reserve
    except InsufficientStock as exc:
        raise ApiError(410, "sold_out", "Sold out.") from exc
    return inserted[0]
