"""S > 1: pending claims that a Redis error left behind, settled from the logs and the orders.

A shopper's claim in their user partition is "pending" while a sharded purchase is in
flight; a timeout can leave it so. Deciding what it should become needs the orders, so it
is the sale's job, not the stock engine's."""

import logging
import time
from typing import cast

from django.conf import settings
from django.db import DatabaseError

from orders.models import Order
from stock.keys import USER_PARTITIONS, ActivityKeys, claim_pending_since, claim_value
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import parse_log_entry, run_claim_settle

logger = logging.getLogger(__name__)

# Log ids come from the Redis clock, a pending claim's time from a web process's.
_CLOCK_MARGIN_MS = 60_000


def claim_pending_settle(
    *, activity_id: int, user_id: int, held: str, shards: int, now_ms: int | None = None
) -> str | None:
    """S > 1: settle a pending claim that a Redis error left behind. Returns the claim the
    shopper holds now when this call changed it ('' = none: free to buy again), else None.

    A claim younger than SECKILL_CLAIM_PENDING_TIMEOUT may belong to a purchase in
    flight and is left alone. An older one becomes the claim of the shopper's
    reservation if a shard script did run (a timeout after success): the entry in a
    shard's log, or once ordered, the live order (the log is read first: an entry leaves
    it only after its order has committed). Only with neither is it removed. Every change
    is a compare-and-set on the exact pending value, so a purchase that settles its own
    claim meanwhile wins, and no shopper ends with two reservations.
    """
    since = claim_pending_since(held)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if since is None or now_ms - since < settings.SECKILL_CLAIM_PENDING_TIMEOUT * 1000:
        return None
    client, keys = stock_redis(), ActivityKeys(activity_id)
    new = _reservation_claim(client, keys, user_id=user_id, shards=shards, since_ms=since - _CLOCK_MARGIN_MS)
    if new is None:
        try:
            live = (
                Order.objects.filter(activity_id=activity_id, user_id=user_id, status__in=Order.LIVE_STATUSES)
                .values_list("shard", "reservation_id")
                .first()
            )
        except DatabaseError as exc:  # cannot tell: the claim stays, the next attempt decides
            logger.warning("pending claim of user %s in activity %s kept: %s", user_id, activity_id, exc)
            return None
        new = claim_value(*live) if live else ""
    partition = keys.user_partition(user_id, USER_PARTITIONS)
    if not run_claim_settle(client, partition, user_id=user_id, expected=held, new=new):
        return None
    logger.info("pending claim of user %s in activity %s settled: %r", user_id, activity_id, new or "released")
    return new


def _reservation_claim(client, keys: ActivityKeys, *, user_id: int, shards: int, since_ms: int) -> str | None:
    """The claim value of the shopper's reservation in any shard's log made since ``since_ms``."""
    for shard in range(shards):
        start = f"{max(since_ms, 0)}-0"
        while True:
            entries = client.xrange(keys.shard(shard).log, min=start, max="+", count=1000)
            for entry_id, fields in entries:
                entry = parse_log_entry(entry_id, fields)
                if entry.user_id == user_id:
                    return claim_value(entry.shard, entry.reservation_id)
            if len(entries) < 1000:
                break
            start = f"({entries[-1][0].decode() if isinstance(entries[-1][0], bytes) else entries[-1][0]}"
    return None


def claims_pending_settle(*, activity_id: int, shards: int, now_ms: int | None = None) -> int:
    """S > 1: settle every pending claim older than SECKILL_CLAIM_PENDING_TIMEOUT
    (reconciliation), so that a shopper who does not try again is not "queued" forever.
    Returns the number of claims settled."""
    layout = StockLayout(activity_id, shards)
    if not layout.sharded:
        return 0  # one key: the script records the shopper in the same step, nothing is pending
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now_ms - int(settings.SECKILL_CLAIM_PENDING_TIMEOUT * 1000)
    client, settled = stock_redis(), 0
    for partition in layout.partitions:
        # Without withscores the reply is the members alone (redis-py types both replies as one).
        for member in cast(list[bytes], client.zrangebyscore(partition.pending, "-inf", cutoff)):
            user_id = int(member)
            held = client.hget(partition.users, user_id)
            held = held.decode() if isinstance(held, bytes) else held or ""
            if claim_pending_since(held) is None:
                # Not pending any more (gone with its keys, or restored by a warm-up).
                client.zrem(partition.pending, member)
                continue
            new = claim_pending_settle(
                activity_id=activity_id, user_id=user_id, held=held, shards=shards, now_ms=now_ms
            )
            settled += new is not None
    return settled
