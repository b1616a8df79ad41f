"""Purchases while the stock Redis is away, and the re-synchronisation when it returns.

Service functions (writes) of the Redis-down mode; ``purchase_reserve`` decides when to
use them through the circuit breaker (``seckill.breaker``).

* ``purchase_fallback``: the database path (``orders.services.order_create_direct``:
  the order insert and the conditional stock update in one transaction) behind a strict
  per-process cap of ``SECKILL_FALLBACK_CONCURRENCY`` concurrent purchases; beyond it,
  503 ``busy`` at once. PostgreSQL's row lock on the stock row serialises these
  purchases, so more concurrency buys only lock waits.
* ``stock_resync``: run by the breaker's half-open probe before it closes, and by beat.
  Redis has not seen the units the database path sold, so its stock (and its
  participants) are derived again from the database and the log
  (``activity_warmup(force=True)``) for every live activity whose database-path orders
  are not yet counted in Redis.

The resync epoch serialises the two across processes. Every re-synchronisation holds an
exclusive PostgreSQL advisory lock from before its database reads until after its Redis
writes and bumps ``ResyncEpoch`` before letting go; every database-path transaction
holds the same lock shared, and refuses (``ResyncedMeanwhile``) when the epoch is not the
one its process's breaker read when it opened. So a database-path sale either commits
before a re-synchronisation reads the database (and is counted in Redis), or is made by
a process whose breaker opened after that re-synchronisation; any other finds the epoch
moved and sells nothing. An advisory lock rather than a row lock: the re-synchronisation
spans several transactions (each of its database pictures is one REPEATABLE READ
transaction of its own, taken between Redis reads), and it must hold no transaction
open while it talks to Redis; a session-level advisory lock spans them without one. The
database-path transactions take it shared, so they never wait for each other.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from core.errors import DATABASE_AWAY, ApiError, busy
from core.memory import register_reset
from core.metrics import FALLBACK_PURCHASES
from inventory.models import SeckillStock
from inventory.services import InsufficientStock
from orders.models import Order
from orders.services import DB_PATH_PREFIX, OrderDuplicate, order_create_direct
from stock.keys import ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import stock_redis

from .breaker import resync_epoch
from .lifecycle import activity_warmup
from .models import Activity, ResyncEpoch
from .selectors import ActivitySnapshot, live_activities

logger = logging.getLogger(__name__)

# The PostgreSQL advisory lock of the resync epoch (one constant of this app's own).
RESYNC_LOCK_KEY = 0x5EC4_1117_E90C


@dataclass(frozen=True)
class Reserved:
    reservation_id: str
    remaining: int


class ResyncedMeanwhile(Exception):
    """The stock was re-synchronised after this process's breaker opened: Redis is back
    and counts what the database held then; a database-path sale now would not be counted."""


@lru_cache(maxsize=1)
def _fallback_slots() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(settings.SECKILL_FALLBACK_CONCURRENCY)


@register_reset
def fallback_slots_reset() -> None:
    """Forget the semaphore: the next purchase makes one of SECKILL_FALLBACK_CONCURRENCY
    slots as the settings say now (core.memory.forget_all calls this)."""
    _fallback_slots.cache_clear()


def purchase_fallback(*, activity: ActivitySnapshot, user_id: int, quantity: int, epoch: int | None):
    """The purchase on the database alone, if the stock has not been re-synchronised
    since the epoch ``epoch`` (the breaker's, read when it opened); returns
    ``Reserved``. Raises ResyncedMeanwhile (nothing written) when it has."""
    slots = _fallback_slots()
    if not slots.acquire(blocking=False):
        FALLBACK_PURCHASES.labels("busy").inc()
        raise busy()
    try:
        with transaction.atomic():
            _resync_epoch_hold(seen=epoch)
            order = order_create_direct(activity_id=activity.id, user_id=user_id, quantity=quantity)
    except ResyncedMeanwhile:
        FALLBACK_PURCHASES.labels("resynced").inc()
        raise
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


def _resync_epoch_hold(*, seen: int | None) -> None:
    """First step of a database-path transaction: no re-synchronisation reads the
    database until it has committed (the lock, shared), and none has finished since
    ``seen`` (read after the lock: one that held it has bumped the epoch by then)."""
    assert connection.in_atomic_block, "the shared lock lasts as long as the purchase's transaction"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [RESYNC_LOCK_KEY])
    if seen is None or resync_epoch() != seen:
        raise ResyncedMeanwhile


@contextlib.contextmanager
def _resync_epoch_exclusive() -> Iterator[None]:
    """Hold the resync lock alone: waits until every database-path transaction in flight
    (of any process) has committed or failed, and keeps new ones waiting until released.
    Session-level, so the re-synchronisation's own transactions come and go under it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [RESYNC_LOCK_KEY])
    try:
        yield
    finally:
        # The connection gone means the session, and its lock, went with it.
        with contextlib.suppress(*DATABASE_AWAY), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [RESYNC_LOCK_KEY])


def _resync_epoch_bump() -> None:
    """Under the exclusive lock (so one writer at a time): database-path purchases that
    were waiting for the lock find the new value once it is released."""
    bumped = ResyncEpoch.objects.filter(pk=1).update(value=F("value") + 1, bumped_at=timezone.now())
    if not bumped:
        ResyncEpoch.objects.create(pk=1, value=1, bumped_at=timezone.now())


def stock_resync(*, before_close: bool = False) -> list[int]:
    """Re-derive the Redis stock of live activities the database path sold from.

    ``before_close`` (the breaker's probe): Redis is about to admit purchases in this
    process again, so the epoch is bumped even when nothing was due: other processes
    stop selling from the database, which Redis would not know about from now on.
    Beat's call takes the lock only when something is due (a count and a GET per live
    activity otherwise).

    Returns the activities re-warmed. Raises RedisError / WarmupError when it could not
    finish: the breaker then stays open.
    """
    client = stock_redis()
    live = list(live_activities().filter(status=Activity.Status.WARMED).values_list("pk", "shards"))
    if not before_close and all(_in_sync(client, activity_id, shards) for activity_id, shards in live):
        return []
    resynced = []
    with _resync_epoch_exclusive():
        # Under the lock: every database-path order committed so far is counted here,
        # and none commits until the lock is released.
        for activity_id, shards in live:
            sold_by_db = _sold_by_db(activity_id)
            if _in_sync(client, activity_id, shards, sold_by_db=sold_by_db):
                continue
            result = activity_warmup(activity_id=activity_id, force=True)
            client.set(ActivityKeys(activity_id).db_synced, sold_by_db)
            logger.warning("redis back: activity %s re-synchronised from the database: %s", activity_id, result)
            resynced.append(activity_id)
        # Only a finished re-synchronisation moves the epoch: one that failed set no
        # ``dbsynced`` it did not finish, so the next one counts what is sold meanwhile, and
        # a probe whose Redis is still away does not turn other processes from the database.
        if resynced or before_close:
            _resync_epoch_bump()
    return resynced


def _sold_by_db(activity_id: int) -> int:
    return Order.objects.filter(activity_id=activity_id, reservation_id__startswith=DB_PATH_PREFIX).count()


def _in_sync(client, activity_id: int, shards: int, *, sold_by_db: int | None = None) -> bool:
    """Redis holds the stock and has counted every database-path order of the activity."""
    if sold_by_db is None:
        sold_by_db = _sold_by_db(activity_id)
    stock = StockLayout(activity_id, shards).totals(client)[0]
    return stock is not None and int(client.get(ActivityKeys(activity_id).db_synced) or 0) >= sold_by_db
