"""The Redis side of a reservation after the purchase script: read the log, acknowledge
entries that became orders, release entries that never will."""

from collections.abc import Iterable

from .keys import ActivityKeys
from .redis_client import stock_redis
from .scripts import LogEntry, parse_log_entry, run_release, run_return


def reservations_pending(
    *, activity_id: int, after: str | None = None, older_than_ms: int | None = None, count: int = 1000
) -> list[LogEntry]:
    """Log entries (reservations without an acknowledged order), oldest first.

    ``after``: only entries after this reservation id; ``older_than_ms``: only entries
    made before this Unix time in milliseconds.
    """
    start = f"({after}" if after else "-"
    end = f"({older_than_ms}-0" if older_than_ms is not None else "+"
    entries = stock_redis().xrange(ActivityKeys(activity_id).log, min=start, max=end, count=count)
    return [parse_log_entry(eid, fields) for eid, fields in entries]


def reservations_acknowledge(*, activity_id: int, reservation_ids: Iterable[str]) -> None:
    """Drop entries whose orders exist: the log holds only what still needs an order."""
    ids = list(reservation_ids)
    if not ids:
        return
    keys = ActivityKeys(activity_id)
    pipe = stock_redis().pipeline(transaction=False)
    pipe.xdel(keys.log, *ids)
    pipe.hdel(keys.attempts, *ids)
    pipe.execute()


def reservation_attempt(*, activity_id: int, reservation_id: str) -> int:
    """Count one more replay attempt; returns the count so far."""
    return int(stock_redis().hincrby(ActivityKeys(activity_id).attempts, reservation_id, 1))


def reservation_release(
    *, activity_id: int, entry: LogEntry, free_participant: bool, reason: str, live_reservation_id: str = ""
) -> bool:
    """Return a reservation's units to Redis; True if this call released it.

    ``live_reservation_id``: when the shopper keeps a live order, the participant record
    points at that order's reservation again (so cancelling it frees the shopper).
    """
    released = run_release(
        stock_redis(),
        ActivityKeys(activity_id),
        reservation_id=entry.reservation_id,
        user_id=entry.user_id,
        quantity=entry.quantity,
        free_participant=free_participant,
        reason=reason,
        live_reservation_id=live_reservation_id,
    )
    if released:
        stock_redis().hdel(ActivityKeys(activity_id).attempts, entry.reservation_id)
    return released


def order_units_return(*, activity_id: int, order_no: str, quantity: int, user_id: int, reservation_id: str) -> bool:
    """Put a cancelled order's units back in Redis and free the shopper; once per order."""
    return run_return(
        stock_redis(),
        ActivityKeys(activity_id),
        order_no=order_no,
        quantity=quantity,
        user_id=user_id,
        reservation_id=reservation_id,
    )
