"""Purchases while the stock Redis is away, and the re-synchronisation when it returns.

Service functions (writes) of the Redis-down mode; ``purchase_reserve`` decides when to
use them through the circuit breaker (``seckill.breaker``).

* ``purchase_fallback``: the database path (``orders.services.order_create_direct``:
  the order insert and the conditional stock update in one transaction) behind a strict
  per-process cap of ``SECKILL_FALLBACK_CONCURRENCY`` concurrent purchases; beyond it,
  503 ``busy`` at once. PostgreSQL's row lock on the stock row serialises these
  purchases, so more concurrency buys only lock waits.
* ``stock_resync``: run by the breaker's half-open probe before it closes. Redis has
  not seen the units the database path sold, so its stock (and its participants) are
  derived again from the database and the log (``activity_warmup(force=True)``) for
  every live activity whose database-path orders are not yet counted in Redis.
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache

from django.conf import settings

from inventory.models import SeckillStock
from inventory.services import InsufficientStock
from orders.models import Order
from orders.services import DB_PATH_PREFIX, OrderDuplicate, order_create_direct

from .errors import DATABASE_AWAY, ApiError, busy
from .keys import ActivityKeys
from .metrics import FALLBACK_PURCHASES
from .models import Activity
from .redis_client import stock_redis
from .selectors import ActivitySnapshot, live_activities, redis_stock_totals

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _fallback_slots() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(settings.SECKILL_FALLBACK_CONCURRENCY)


def purchase_fallback(*, activity: ActivitySnapshot, user_id: int, quantity: int):
    """The purchase on the database alone; returns ``services.Reserved``."""
    from .services import Reserved

    slots = _fallback_slots()
    if not slots.acquire(blocking=False):
        FALLBACK_PURCHASES.labels("busy").inc()
        raise busy()
    try:
        order = order_create_direct(activity_id=activity.id, user_id=user_id, quantity=quantity)
    except InsufficientStock as exc:
        FALLBACK_PURCHASES.labels("sold_out").inc()
        raise ApiError(410, "sold_out", "Sold out.") from exc
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
    available = SeckillStock.objects.filter(activity_id=activity.id).values_list("available", flat=True).first()
    return Reserved(order.reservation_id, int(available or 0))


def stock_resync() -> list[int]:
    """Re-derive the Redis stock of live activities the database path sold from.

    Returns the activities re-warmed. Raises RedisError / WarmupError when it could not
    finish: the breaker then stays open.
    """
    from .services import activity_warmup

    client = stock_redis()
    resynced = []
    live = live_activities().filter(status=Activity.Status.WARMED).values_list("pk", "shards")
    for activity_id, shards in live:
        keys = ActivityKeys(activity_id)
        sold_by_db = Order.objects.filter(activity_id=activity_id, reservation_id__startswith=DB_PATH_PREFIX).count()

        def in_sync() -> bool:
            stock = redis_stock_totals(activity_id=activity_id, shards=shards)[0]  # noqa: B023 - called at once
            return stock is not None and int(client.get(keys.db_synced) or 0) >= sold_by_db  # noqa: B023

        if in_sync():
            continue
        # One process re-warms an activity at a time; the others find it done.
        with client.lock(keys.resync_lock, timeout=60, blocking_timeout=30):
            if in_sync():
                continue
            result = activity_warmup(activity_id=activity_id, force=True)
            client.set(keys.db_synced, sold_by_db)
        logger.warning("redis back: activity %s re-synchronised from the database: %s", activity_id, result)
        resynced.append(activity_id)
    return resynced
