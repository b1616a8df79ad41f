"""The purchase: one atomic Redis script, or the database path while Redis is away."""

import asyncio
import contextlib
import functools
import logging
import time

import redis
from django.core.exceptions import SynchronousOnlyOperation

from core.errors import DATABASE_AWAY, ApiError, busy, outcome_unknown
from core.loop_bridge import on_loop
from seckill.purchase.fallback import Reserved, purchase_fallback, reserve_participants_sync
from seckill.purchase.took_part import took_part_refusal, took_part_remember
from seckill.sale.claims import claim_pending_settle
from seckill.sale.snapshot import ActivitySnapshot
from seckill.sale.soldout import sold_out_note, sold_out_remember
from stock.breaker import redis_breaker
from stock.handover import reserve_hand_over
from stock.keys import ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import PurchaseReply, ScriptCode

logger = logging.getLogger(__name__)

# How long a purchase that found Redis's share short while the reserve holds units waits
# for the hand-over (its own or another process's) before it answers busy. A hand-over is
# one database update and one script: milliseconds.
HANDOVER_WAIT = 2.0


def purchase_reserve(*, activity: ActivitySnapshot, user_id: int, quantity: int) -> Reserved:
    """Gate 2: the atomic Lua script; then hand the reservation to a Celery worker.

    The caller has run gate 1 (input, time window, token). Raises ApiError otherwise.
    With Redis away, the circuit breaker sends purchases to the database path, which
    sells the activity's reserve only (``seckill.purchase.fallback``).
    """
    breaker = redis_breaker()
    ticket = breaker.allow()
    database_path = functools.partial(
        _purchase_database_path, breaker, activity=activity, user_id=user_id, quantity=quantity
    )
    if ticket is None:
        return database_path()
    try:
        if ticket == breaker.PROBE:
            reserve_participants_sync()  # who bought from the reserve cannot buy again through Redis
        # The memories below count from the moment of asking: what the script said was
        # true then, and a busy process may remember it much later.
        asked_at = time.monotonic()
        reply = _reserve(activity, user_id=user_id, quantity=quantity)
        if (
            reply.code == ScriptCode.DUPLICATE
            and reply.held
            and claim_pending_settle(activity_id=activity.id, user_id=user_id, held=reply.held, shards=activity.shards)
            == ""
        ):
            # A pending claim that an error left behind, without a reservation: gone, so
            # this purchase is the shopper's next attempt.
            asked_at = time.monotonic()
            reply = _reserve(activity, user_id=user_id, quantity=quantity)
        if reply.code == ScriptCode.HELD:
            # Redis's share is short but the reserve is not empty: "sold out" would not be
            # final. The reserve joins Redis's share, then the purchase asks again.
            _reserve_handed_over(activity.id)
            asked_at = time.monotonic()
            reply = _reserve(activity, user_id=user_id, quantity=quantity)
    except ReplyLost as exc:
        # The script may have run: neither "nothing was taken" (busy) nor the database path.
        breaker.record_failure(ticket)
        logger.warning("purchase: Redis's reply for activity %s was lost, outcome unknown: %s", activity.id, exc)
        raise outcome_unknown() from exc
    except redis.TimeoutError as exc:
        # A step around the script (the hand-over, a pending claim) may have acted half-way.
        breaker.record_failure(ticket)
        logger.warning("purchase: Redis timed out for activity %s: %s", activity.id, exc)
        raise busy() from exc
    except redis.RedisError as exc:
        breaker.record_failure(ticket)
        logger.warning("purchase: Redis unavailable for activity %s, database path: %s", activity.id, exc)
        return database_path()
    except BaseException:
        if ticket == breaker.PROBE:  # a probe ending any other way must not leave the breaker half-open
            breaker.record_failure(ticket)
        raise
    breaker.record_success(ticket)

    # S > 1: one shard's figure proves nothing about the others; its "sold out" is checked
    # over every shard and the reserve (stock.scripts._sharded_last_word), so it is a fact.
    whole_stock = not StockLayout(activity.id, activity.shards).sharded
    if whole_stock and reply.code in (ScriptCode.RESERVED, ScriptCode.DUPLICATE, ScriptCode.SOLD_OUT):
        sold_out_note(activity.id, reply.remaining, since=asked_at)  # "none left" answered here, for a moment
    elif reply.code == ScriptCode.SOLD_OUT:
        sold_out_remember(activity.id, since=asked_at)
    if reply.code in (ScriptCode.RESERVED, ScriptCode.DUPLICATE):
        took_part_remember(activity.id, user_id, since=asked_at)  # a retry is answered 409 here, for a moment
    if reply.code == ScriptCode.RESERVED:
        if reply.kick:
            _enqueue_drain(activity.id)
        return Reserved(reply.reservation_id, reply.remaining)
    if reply.code == ScriptCode.DUPLICATE:
        raise took_part_refusal()
    if reply.code == ScriptCode.SOLD_OUT:
        raise ApiError(410, "sold_out", "Sold out.")
    if reply.code == ScriptCode.NOT_WARMED:
        logger.error("purchase: activity %s is live but not warmed", activity.id)
        raise busy("The sale is not ready yet; please try again in a moment.")
    if reply.code in (ScriptCode.HELD, ScriptCode.UNSETTLED):
        raise busy("Units are being put back on sale; please try again in a moment.")
    raise ApiError(400, "invalid_request", "quantity must be a positive integer within the per-user limit.")


class ReplyLost(Exception):
    """The purchase script was sent and no reply came (the link lost, or the reply later
    than the socket timeout): it may have run and taken units, or not."""


def _reserve(activity: ActivitySnapshot, *, user_id: int, quantity: int) -> PurchaseReply:
    try:
        return StockLayout(activity.id, activity.shards).reserve(
            stock_redis(), user_id=user_id, quantity=quantity, limit=activity.per_user_limit
        )
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if _refused(exc):
            raise  # no connection: the script never left this process
        raise ReplyLost(str(exc)) from exc


def _refused(exc: BaseException) -> bool:
    """Redis refused the connection (``ConnectionRefusedError`` in the exception's chain):
    nothing was sent. Any other connection or timeout error may have come after sending."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reserve_handed_over(activity_id: int) -> None:
    """The reserve handed over to Redis's share, by this process or another (one at a time,
    under a redis-py Lock); returns once it is, raises busy after ``HANDOVER_WAIT``. It
    updates the database and may wait for the lock: on the event loop it asks for a thread
    (``SynchronousOnlyOperation``: the server runs the purchase again on its pool)."""
    if on_loop():
        raise SynchronousOnlyOperation("the reserve's hand-over updates the database")
    keys = ActivityKeys(activity_id)
    client = stock_redis()
    lock = client.lock(keys.handover_lock, timeout=30, sleep=0.005, blocking_timeout=HANDOVER_WAIT)
    if not lock.acquire():
        raise busy("Units are being put back on sale; please try again in a moment.")
    try:
        if int(client.get(keys.reserve) or 0) > 0:  # not handed over by the holder before us
            added = reserve_hand_over(activity_id=activity_id)
            logger.info("activity %s: Redis's share ran short; %s reserve units joined it", activity_id, added)
    except DATABASE_AWAY as exc:
        logger.warning("activity %s: the reserve's hand-over waits for the database: %s", activity_id, exc)
        raise busy("Units are being put back on sale; please try again in a moment.") from exc
    finally:
        with contextlib.suppress(redis.exceptions.LockError):
            lock.release()


def _purchase_database_path(breaker, *, activity: ActivitySnapshot, user_id: int, quantity: int) -> Reserved:
    """The database path, only while the breaker is open; busy otherwise (closed after a
    failure below the threshold, or half-open while the probe runs)."""
    if not breaker.database_path_open():
        raise busy()
    return purchase_fallback(activity=activity, user_id=user_id, quantity=quantity)


def _enqueue_drain(activity_id: int) -> None:
    """Ask a worker to turn the log into orders. Fire and forget: if the broker is down,
    the flag expires and a later purchase asks again, and the replay is behind both. On the
    event loop the message is sent from a thread: the loop never waits for the broker."""
    if on_loop():
        asyncio.get_running_loop().run_in_executor(None, _drain_request, activity_id)
    else:
        _drain_request(activity_id)


def _drain_request(activity_id: int) -> None:
    from seckill.tasks import reservations_drain_task

    try:
        reservations_drain_task.apply_async(args=[activity_id])
    except Exception as exc:  # any broker failure; the reservation is safe in the log
        logger.warning("purchase: drain request for activity %s failed, the log keeps it: %s", activity_id, exc)
