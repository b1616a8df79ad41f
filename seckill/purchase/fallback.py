"""Purchases while the stock Redis is away: the database path, selling the reserve only.

Service functions (writes) of the Redis-down mode; ``purchase_reserve`` decides when to
use them through the circuit breaker (``stock.breaker``).

* ``purchase_fallback``: the database path (``orders.services.order_create_direct``: the
  order insert and the conditional update of the activity's database reserve in one
  transaction) behind a strict per-process cap of ``SECKILL_FALLBACK_CONCURRENCY``
  concurrent purchases; beyond it, 503 ``busy`` at once. PostgreSQL's row lock on the
  stock row serialises these purchases, so more concurrency buys only lock waits.
* One owner per unit: the reserve is never loaded into Redis, and Redis's reservations
  never become orders from it (``inventory.services``, the two shares). So no partition,
  breaker state of any process or backlog of reservations can promise a unit twice, and
  the Redis stock needs no re-synchronisation when Redis returns. While Redis is away at
  most the reserve sells; a reserve used up answers 503 ``busy`` (Redis may still hold
  units), and only a stock with nothing left anywhere answers 410 ``sold_out``.
* ``reserve_participants_sync``: the shoppers of database-path orders get their records
  in Redis (run by the breaker's probe before it closes, and by beat), so they cannot
  buy again through Redis; those whose database-path order was cancelled are freed. The
  reserve Redis counts comes down to what the database path left of it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.db import transaction

from core.errors import DATABASE_AWAY, ApiError, busy
from core.memory import register_reset
from core.metrics import FALLBACK_PURCHASES
from inventory.models import SeckillStock
from inventory.services import InsufficientStock
from orders.models import DB_PATH_PREFIX, Order
from orders.services.creation import OrderDuplicate, order_create_direct
from seckill.models import Activity
from seckill.sale.snapshot import ActivitySnapshot, live_activities
from stock.handover import released_units_hand_over
from stock.layout import StockLayout
from stock.redis_client import stock_redis

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reserved:
    reservation_id: str
    remaining: int


@lru_cache(maxsize=1)
def _fallback_slots() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(settings.SECKILL_FALLBACK_CONCURRENCY)


@register_reset
def fallback_slots_reset() -> None:
    """Forget the semaphore: the next purchase makes one of SECKILL_FALLBACK_CONCURRENCY
    slots as the settings say now (core.memory.forget_all calls this)."""
    _fallback_slots.cache_clear()


def purchase_fallback(*, activity: ActivitySnapshot, user_id: int, quantity: int) -> Reserved:
    """The purchase on the database alone, from the activity's reserve; returns
    ``Reserved`` (``remaining``: what is left of the reserve)."""
    slots = _fallback_slots()
    if not slots.acquire(blocking=False):
        FALLBACK_PURCHASES.labels("busy").inc()
        raise busy()
    try:
        with transaction.atomic():
            order = order_create_direct(activity_id=activity.id, user_id=user_id, quantity=quantity)
    except InsufficientStock as exc:
        return _reserve_used_up(activity.id, exc)
    except OrderDuplicate as exc:
        FALLBACK_PURCHASES.labels("duplicate").inc()
        raise ApiError(409, "duplicate", "You have already taken part in this sale.") from exc
    except DATABASE_AWAY as exc:  # the database is away as well
        FALLBACK_PURCHASES.labels("busy").inc()
        logger.error("purchase fallback: database unavailable too: %s", exc)
        raise busy() from exc
    finally:
        slots.release()
    FALLBACK_PURCHASES.labels("queued").inc()
    reserve = SeckillStock.objects.filter(activity_id=activity.id).values_list("reserve", flat=True).first()
    return Reserved(order.reservation_id, int(reserve or 0))


def _reserve_used_up(activity_id: int, exc: Exception):
    """The reserve cannot cover the purchase: sold out only when no unit is left anywhere
    (Redis's share included); otherwise Redis may still hold some, so busy."""
    available = SeckillStock.objects.filter(activity_id=activity_id).values_list("available", flat=True).first()
    if not available:
        FALLBACK_PURCHASES.labels("sold_out").inc()
        raise ApiError(410, "sold_out", "Sold out.") from exc
    FALLBACK_PURCHASES.labels("reserve_used_up").inc()
    raise busy("The sale cannot take purchases right now; please try again in a moment.") from exc


def reserve_participants_sync() -> int:
    """Write the records of database-path shoppers into Redis, for every warmed live
    activity: a live order's shopper gets a record naming it (unless they hold one
    already: a reservation in flight keeps its own), a cancelled one's is removed if it
    still names that order. Returns the records changed. Costs one query per live
    activity with none; raises RedisError when Redis is away."""
    client, changed = stock_redis(), 0
    for activity_id, shards in live_activities().filter(status=Activity.Status.WARMED).values_list("pk", "shards"):
        orders = Order.objects.filter(activity_id=activity_id, reservation_id__startswith=DB_PATH_PREFIX)
        rows = list(orders.values_list("user_id", "reservation_id", "status"))
        if not rows:
            continue
        layout = StockLayout(activity_id, shards)
        live = {u: r for u, r, status in rows if status in Order.LIVE_STATUSES}
        gone = {u: r for u, r, status in rows if status not in Order.LIVE_STATUSES and u not in live}
        changed += layout.records_add(client, {u: layout.record(0, r) for u, r in live.items()})
        changed += layout.records_clear(client, {u: layout.record(0, r) for u, r in gone.items()})
        # The reserve Redis counts comes down to what the database path left of it, and the
        # units of its cancelled orders join Redis's stock.
        released_units_hand_over(activity_id=activity_id)
    if changed:
        logger.info("database-path shoppers: %s records written to or removed from Redis", changed)
    return changed
