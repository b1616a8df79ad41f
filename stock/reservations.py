"""The Redis side of a reservation after the purchase script: read the log, acknowledge
entries that became orders, release entries that never will.

With sharded stock (S > 1) every entry lives in the log of the shard it was taken
from (``LogEntry.shard``), and the shopper's claim in their user partition."""

import logging
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .keys import ActivityKeys
from .layout import StockLayout, activity_shards
from .redis_client import stock_redis
from .scripts import LogEntry, UnitsBack, parse_log_entry

logger = logging.getLogger(__name__)

# Log entries dropped per XDEL: Redis spends 3-4.5 µs per id, and a drain batch's 500 in
# one command held it (and every purchase waiting on it) for 1.4-2.1 ms; chunks of 50 take
# the same round trip and let the purchases' commands in between (docs/DESIGN-NOTES.md).
ACKNOWLEDGE_CHUNK = 50


def reservations_pending(
    *,
    activity_id: int,
    after: str | None = None,
    older_than_ms: int | None = None,
    count: int = 1000,
    shard: int | None = None,
) -> list[LogEntry]:
    """Log entries (reservations without an acknowledged order), oldest first.

    ``after``: only entries after this reservation id; ``older_than_ms``: only entries
    made before this Unix time in milliseconds. ``shard``: that shard's log only; None
    reads every shard (``after`` then applies to each shard's log).
    """
    start = f"({after}" if after else "-"
    end = f"({older_than_ms}-0" if older_than_ms is not None else "+"
    shards = [shard] if shard is not None else range(activity_shards(activity_id))
    client, keys = stock_redis(), ActivityKeys(activity_id)
    found: list[LogEntry] = []
    for index in shards:
        entries = client.xrange(keys.shard(index).log, min=start, max=end, count=count - len(found)) or []
        found += [parse_log_entry(eid, fields) for eid, fields in entries]
        if len(found) >= count:
            break
    return found


class Backlog(NamedTuple):
    """The reservations still waiting for an order, every shard's log together."""

    entries: int
    oldest_ms: int | None  # when the oldest was made (Unix ms, from its entry id); None: none wait


def reservations_backlog(*, activity_id: int) -> Backlog:
    """How many reservations wait for an order and since when: each shard log's length
    and first entry, in one round trip."""
    keys = ActivityKeys(activity_id)
    pipe = stock_redis().pipeline(transaction=False)
    for shard in keys.shards(activity_shards(activity_id)):
        pipe.xlen(shard.log)
        pipe.xrange(shard.log, count=1)
    replies = pipe.execute()
    lengths, firsts = replies[0::2], replies[1::2]
    oldest = [int(parse_log_entry(*first[0]).reservation_id.split("-")[0]) for first in firsts if first]
    return Backlog(sum(lengths), min(oldest) if oldest else None)


def reservations_acknowledge(*, activity_id: int, reservation_ids: Iterable[str], shard: int = 0) -> None:
    """Drop entries whose orders exist: the log holds only what still needs an order."""
    ids = list(reservation_ids)
    if not ids:
        return
    keys = ActivityKeys(activity_id).shard(shard)
    pipe = stock_redis().pipeline(transaction=False)
    for start in range(0, len(ids), ACKNOWLEDGE_CHUNK):
        chunk = ids[start : start + ACKNOWLEDGE_CHUNK]
        pipe.xdel(keys.log, *chunk)
        pipe.hdel(keys.attempts, *chunk)
    pipe.execute()


def reservations_acknowledge_entries(*, activity_id: int, entries: Iterable[LogEntry]) -> None:
    """``reservations_acknowledge`` for entries of any shards, grouped by shard."""
    by_shard: dict[int, list[str]] = {}
    for entry in entries:
        by_shard.setdefault(entry.shard, []).append(entry.reservation_id)
    for shard, ids in by_shard.items():
        reservations_acknowledge(activity_id=activity_id, reservation_ids=ids, shard=shard)


def reservation_attempt(*, activity_id: int, reservation_id: str, shard: int = 0) -> int:
    """Count one more replay attempt; returns the count so far."""
    return int(stock_redis().hincrby(ActivityKeys(activity_id).shard(shard).attempts, reservation_id, 1))


def reservation_release(
    *,
    activity_id: int,
    entry: LogEntry,
    free_participant: bool,
    reason: str,
    live_reservation_id: str = "",
    live_shard: int = 0,
    units_back: bool = True,
) -> bool:
    """Release a reservation in Redis; True if this call released it. Its units go back
    on sale, or (``units_back`` false: the database has no such units) leave ``loaded``.

    ``live_reservation_id`` (of shard ``live_shard``): when the shopper keeps a live
    order, the participant record points at that order's reservation again (so
    cancelling it frees the shopper).
    """
    return StockLayout.of(activity_id).release(
        stock_redis(),
        entry,
        free_participant=free_participant,
        reason=reason,
        live_reservation_id=live_reservation_id,
        live_shard=live_shard,
        units_back=units_back,
    )


def orders_units_back(*, activity_id: int, returns: Sequence[UnitsBack]) -> list[bool]:
    """Put cancelled orders' units back in Redis (each to the shard it came from) and free
    their shoppers, once per order, in one or two round trips; True for each returned now."""
    return StockLayout.of(activity_id).units_return(stock_redis(), returns)


def order_participant_free(*, activity_id: int, user_id: int, reservation_id: str) -> bool:
    """Free the shopper of a cancelled order whose units never were in Redis (the
    database path's), if their record still names it."""
    layout = StockLayout.of(activity_id)
    return bool(layout.records_clear(stock_redis(), {user_id: layout.record(0, reservation_id)}))
