"""The stock's scripts (stock/lua/stock/): a purchase on one key or on shards, its
release and return, the warm-up, the reserve's handover, the sharded re-warm's freeze and
the snapshot reconciliation reads."""

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import NoScriptError

from core.metrics import script_timer

from ..keys import ActivityKeys, claim_pending, claim_value
from ..redis_client import StockRedis
from .loader import LuaScript, ScriptCode, lua_script, refused_raised

PURCHASE = lua_script("stock/purchase")
RELEASE = lua_script("stock/release")
WARMUP = lua_script("stock/warmup")
FREEZE = lua_script("stock/freeze")
SNAPSHOT = lua_script("stock/snapshot")
RETURN = lua_script("stock/return")
CLAIM = lua_script("stock/claim")
CLAIM_SETTLE = lua_script("stock/claim_settle")
SHARD_PURCHASE = lua_script("stock/shard_purchase")
SHARD_RELEASE = lua_script("stock/shard_release")
SHARD_RETURN = lua_script("stock/shard_return")
HANDOVER = lua_script("stock/handover")

# Sharded stock: shards tried per purchase before "sold out" (a random one, then two more).
SHARD_TRIES = 3


@dataclass(frozen=True)
class PurchaseReply:
    code: int
    remaining: int
    reservation_id: str
    shard: int = 0
    kick: bool = False  # this reservation set the drain flag: ask a worker to drain the log
    held: str = ""  # S > 1, duplicate: the claim the shopper holds (maybe a pending one)


def run_purchase_sharded(
    client: StockRedis, keys: ActivityKeys, *, user_id: int, quantity: int, limit: int, shards: int, partitions: int
) -> PurchaseReply:
    """Claim the shopper in their partition, then try a random shard and up to two more
    distinct ones; if those have too little, ``_sharded_last_word`` looks at every shard.
    On success the claim records the reservation, otherwise it is released. Each script
    touches one slot.
    """
    part = keys.user_partition(user_id, partitions)
    now_ms = int(time.time() * 1000)
    pending = claim_pending(now_ms)
    with script_timer("claim"):
        held = CLAIM(keys=[part.users, part.failed, part.pending], args=[user_id, pending, now_ms], client=client)
    if held == ScriptCode.INVALID:
        return PurchaseReply(ScriptCode.INVALID, 0, "")
    if held != 1:
        return PurchaseReply(ScriptCode.DUPLICATE, 0, "", held=held.decode() if isinstance(held, bytes) else held)
    # A Redis error on the way leaves the claim pending: a timed-out script may have
    # reserved, and a shopper blocked is safer than one who can buy twice. Once it is
    # older than SECKILL_CLAIM_PENDING_TIMEOUT, seckill.sale.claims.claim_pending_settle
    # settles it from the shard logs and the orders.
    tried = random.sample(range(shards), min(SHARD_TRIES, shards))
    reply = _shard_purchases(client, keys, tried, user_id=user_id, quantity=quantity, limit=limit)
    if reply.code == ScriptCode.SOLD_OUT:
        reply = _sharded_last_word(client, keys, shards, user_id=user_id, quantity=quantity, limit=limit)
    # Reserved: the claim names the reservation (so release and return find it);
    # otherwise the shopper is free to try again.
    reserved = reply.code == ScriptCode.RESERVED
    new = claim_value(reply.shard, reply.reservation_id) if reserved else ""
    run_claim_settle(client, part, user_id=user_id, expected=pending, new=new)
    return reply


# Rounds of _sharded_last_word before it gives up on a stock that keeps moving.
_LAST_WORD_ROUNDS = 3


def _sharded_last_word(
    client: StockRedis, keys: ActivityKeys, shards: int, *, user_id: int, quantity: int, limit: int
) -> PurchaseReply:
    """The shards tried were short. Read every shard (and the reserve) in one round and try
    those that can serve, fullest first. "Sold out" only when every shard was short at one
    moment and the reserve is empty: a second read finds no shard restocked since the
    first (a rise between two reads would otherwise go unseen, and the units counted short
    in one shard could be in another by then). "Held" while the reserve holds units;
    ``UNSETTLED`` if the stock kept moving."""
    for _ in range(_LAST_WORD_ROUNDS):
        figures = shard_figures(client, keys, shards)
        stocks = figures.stocks
        if stocks is None:
            return PurchaseReply(ScriptCode.NOT_WARMED, 0, "")
        fuller = sorted((i for i, n in enumerate(stocks) if n >= quantity), key=lambda i: -stocks[i])
        if fuller:
            reply = _shard_purchases(client, keys, fuller, user_id=user_id, quantity=quantity, limit=limit)
            if reply.code != ScriptCode.SOLD_OUT:
                return reply
            continue
        if figures.reserve > 0:
            return PurchaseReply(ScriptCode.HELD, figures.units, "")
        if shard_restocks(client, keys, shards) == figures.restocks:
            return PurchaseReply(ScriptCode.SOLD_OUT, figures.units, "")
    return PurchaseReply(ScriptCode.UNSETTLED, 0, "")


@dataclass(frozen=True)
class ShardFigures:
    stocks: tuple[int, ...] | None  # None: a shard is not warmed
    restocks: tuple[int, ...]
    reserve: int

    @property
    def units(self) -> int:
        """The units for sale these figures count: the shards' and the reserve's."""
        return sum(self.stocks or ()) + self.reserve


def shard_figures(client: StockRedis, keys: ActivityKeys, shards: int) -> ShardFigures:
    """Every shard's stock and restock count, and the reserve, in one pipelined round
    (a pipeline, not MGET: the shards' slots differ)."""
    pipe = client.pipeline(transaction=False)
    for i in range(shards):
        pipe.get(keys.shard(i).stock)
        pipe.get(keys.shard(i).restocks)
    pipe.get(keys.reserve)
    *values, reserve = pipe.execute()
    stocks, restocks = values[::2], values[1::2]
    return ShardFigures(
        stocks=None if None in stocks else tuple(int(v) for v in stocks),
        restocks=tuple(int(v or 0) for v in restocks),
        reserve=int(reserve or 0),
    )


def shard_restocks(client: StockRedis, keys: ActivityKeys, shards: int) -> tuple[int, ...]:
    pipe = client.pipeline(transaction=False)
    for i in range(shards):
        pipe.get(keys.shard(i).restocks)
    return tuple(int(v or 0) for v in pipe.execute())


def _shard_purchases(
    client: StockRedis, keys: ActivityKeys, shards: list[int], *, user_id: int, quantity: int, limit: int
) -> PurchaseReply:
    """The shard step on each of ``shards`` in turn until one answers other than sold out."""
    reply = PurchaseReply(ScriptCode.SOLD_OUT, 0, "")
    for shard in shards:
        shard_keys = keys.shard(shard)
        with script_timer("shard_purchase"):
            code, remaining, reservation, kick = SHARD_PURCHASE(
                keys=[shard_keys.stock, shard_keys.log, shard_keys.drain],
                args=[user_id, quantity, limit, shard, settings.SECKILL_DRAIN_KICK_TTL_MS],
                client=client,
            )
        if isinstance(reservation, bytes):
            reservation = reservation.decode()
        reply = PurchaseReply(int(code), int(remaining), reservation, shard=shard, kick=bool(kick))
        if reply.code != ScriptCode.SOLD_OUT:
            break
    return reply


def run_claim_settle(
    client: StockRedis, partition: ActivityKeys, *, user_id: int, expected: str, new: str, reason: str = ""
) -> bool:
    with script_timer("claim_settle"):
        changed = CLAIM_SETTLE(
            keys=[partition.users, partition.failed, partition.pending],
            args=[user_id, expected, new, reason],
            client=client,
        )
    return bool(changed)


def run_shard_release(
    client: StockRedis, shard_keys: ActivityKeys, *, reservation_id: str, quantity: int, units_back: bool = True
) -> bool:
    args: list[str | int] = [reservation_id, quantity, "1" if units_back else "0"]
    with script_timer("shard_release"):
        released = SHARD_RELEASE(
            keys=[shard_keys.stock, shard_keys.log, shard_keys.loaded, shard_keys.restocks], args=args, client=client
        )
    return bool(refused_raised("shard_release", released, args))


@dataclass(frozen=True)
class UnitsBack:
    """A cancelled order's units on their way back to Redis, and whose record to free."""

    order_no: str
    quantity: int
    user_id: int
    reservation_id: str
    shard: int = 0


def run_returns(client: StockRedis, keys: ActivityKeys, returns: Sequence[UnitsBack]) -> list[bool]:
    """One key: each order's units back and its shopper freed, once per order (return.lua);
    True for each returned now. All in one pipeline: a batch of expiries is on sale again
    one round trip after its commit, not one round trip per order later."""
    calls = [
        ([keys.stock, keys.users, keys.returned], [r.order_no, r.quantity, r.user_id, r.reservation_id])
        for r in returns
    ]
    return [bool(reply) for reply in _pipelined(client, RETURN, "return", calls)]


def run_shard_returns(client: StockRedis, keys: ActivityKeys, returns: Sequence[UnitsBack]) -> list[bool]:
    """S > 1: each order's units back into the shard they came from, once per order
    (shard_return.lua), in one pipeline; True for each returned now. The shoppers' claims
    live in other slots: StockLayout.units_return frees them first."""
    calls = []
    for r in returns:
        shard = keys.shard(r.shard)
        calls.append(([shard.stock, shard.returned, shard.restocks], [r.order_no, r.quantity]))
    return [bool(reply) for reply in _pipelined(client, SHARD_RETURN, "shard_return", calls)]


def run_claim_settles(client: StockRedis, settles: Sequence[tuple[ActivityKeys, int, str]]) -> list[bool]:
    """S > 1: free each shopper whose claim is still ``expected`` ((partition, user id,
    expected) each), in one pipeline."""
    calls = [
        ([part.users, part.failed, part.pending], [user_id, expected, "", ""]) for part, user_id, expected in settles
    ]
    return [bool(reply) for reply in _pipelined(client, CLAIM_SETTLE, "claim_settle", calls)]


def _pipelined(client: StockRedis, script: LuaScript, name: str, calls: list[tuple[list[str], list]]) -> list:
    """``script`` once per (KEYS, ARGV) of ``calls``, in one pipeline (not a transaction:
    each call is atomic alone, and in a cluster they may live in different slots). Only for
    scripts that are safe to run twice: a Redis that has not loaded the script answers
    NOSCRIPT, and the whole pipeline runs again once it has."""
    if not calls:
        return []
    for attempt in (1, 2):
        pipe = client.pipeline(transaction=False)
        for keys, args in calls:
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            with script_timer(name):
                replies = pipe.execute()
            break
        except NoScriptError:
            if attempt == 2:
                raise
            client.script_load(script.script)
    return [refused_raised(name, reply, args) for reply, (_, args) in zip(replies, calls, strict=True)]


def purchase_script_call(keys: ActivityKeys, *, user_id: int, quantity: int, limit: int, shard: int = 0) -> dict:
    """The purchase script's KEYS and ARGV (for a pipeline, ``PURCHASE(**call, client=pipe)``)."""
    return {
        "keys": [keys.stock, keys.users, keys.log, keys.failed, keys.drain, keys.reserve],
        "args": [user_id, quantity, limit, shard, settings.SECKILL_DRAIN_KICK_TTL_MS],
    }


def run_purchase(
    client: StockRedis, keys: ActivityKeys, *, user_id: int, quantity: int, limit: int, shard: int = 0
) -> PurchaseReply:
    call = purchase_script_call(keys, user_id=user_id, quantity=quantity, limit=limit, shard=shard)
    with script_timer("purchase"):
        code, remaining, reservation, *kick = PURCHASE(**call, client=client)
    if isinstance(reservation, bytes):
        reservation = reservation.decode()
    return PurchaseReply(int(code), int(remaining), reservation, kick=bool(kick and kick[0]))


def run_release(
    client: StockRedis,
    keys: ActivityKeys,
    *,
    reservation_id: str,
    user_id: int,
    quantity: int,
    free_participant: bool,
    reason: str,
    live_reservation_id: str = "",
    units_back: bool = True,
) -> bool:
    args: list[str | int] = [
        reservation_id,
        user_id,
        quantity,
        "1" if free_participant else "0",
        reason,
        live_reservation_id,
        "1" if units_back else "0",
    ]
    with script_timer("release"):
        released = RELEASE(keys=[keys.stock, keys.users, keys.log, keys.failed, keys.loaded], args=args, client=client)
    return bool(refused_raised("release", released, args))


def run_warmup(
    client: StockRedis,
    keys: ActivityKeys,
    *,
    remaining: int,
    loaded: int,
    expected: int | None,
    log_length: int,
    epoch: str = "",
    handover: tuple[int, int] | None = None,
) -> bool:
    """Set the stock if it still is ``expected`` (None: no stock key, and then the log
    still ``log_length`` entries long), with this warm-up's ``epoch``; True if written.
    ``handover`` (shard 0 only): the database reserve not handed over, and the units the
    database has released to Redis's share so far."""
    with script_timer("warmup"):
        reserve, handed = ("", "") if handover is None else handover
        args: list[str | int] = [
            remaining,
            loaded,
            "" if expected is None else str(expected),
            log_length,
            epoch,
            reserve,
            handed,
        ]
        written = WARMUP(
            keys=[keys.stock, keys.loaded, keys.log, keys.epoch, keys.reserve, keys.handed, keys.restocks],
            args=args,
            client=client,
        )
    return bool(refused_raised("warmup", written, args))


def run_handover(client: StockRedis, keys: ActivityKeys, *, released: int, reserve_left: int | None) -> int:
    """Bring the units the database released to Redis's share into the stock (the
    activity's own tag), and lower the reserve Redis counts to ``reserve_left`` (None:
    leave it); returns the units added (-1: not warmed)."""
    args: list[str | int] = [released, "" if reserve_left is None else reserve_left]
    with script_timer("handover"):
        added = HANDOVER(
            keys=[keys.stock, keys.loaded, keys.handed, keys.reserve, keys.restocks], args=args, client=client
        )
    return int(refused_raised("handover", added, args))


def run_freeze(client: StockRedis, keys: ActivityKeys, *, expected: int | None, log_length: int) -> bool:
    """Remove a shard's stock key if it still is ``expected`` (a sharded re-warm's first
    step); True if frozen."""
    with script_timer("freeze"):
        frozen = FREEZE(
            keys=[keys.stock, keys.log], args=["" if expected is None else str(expected), log_length], client=client
        )
    return bool(frozen)


@dataclass(frozen=True)
class LogEntry:
    reservation_id: str
    user_id: int
    quantity: int
    shard: int

    @property
    def timestamp_ms(self) -> int:
        return int(self.reservation_id.split("-", 1)[0])


def parse_log_entry(entry_id: bytes | str | None, fields) -> LogEntry:
    # redis-py's stream entry type allows a None id (XCLAIM's deleted entries); a log read has none.
    assert entry_id is not None
    if isinstance(fields, list):  # raw Lua reply: flat [k, v, k, v]
        fields = dict(zip(fields[::2], fields[1::2], strict=True))
    get = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}
    return LogEntry(
        reservation_id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
        user_id=int(get["u"]),
        quantity=int(get["q"]),
        shard=int(get.get("s", 0)),
    )


@dataclass(frozen=True)
class RedisSnapshot:
    stock: int | None
    loaded: int | None
    log: tuple[LogEntry, ...]
    # S > 1: each shard's stock (``stock`` is their sum); () for a single key.
    shard_stocks: tuple[int | None, ...] = ()
    # The size of the ``returned`` set(s): cancelled orders whose units are in the stock.
    returned: int = 0

    @property
    def warmed(self) -> bool:
        return self.stock is not None

    @property
    def log_units(self) -> int:
        return sum(e.quantity for e in self.log)


def run_snapshot(client: StockRedis, keys: ActivityKeys) -> RedisSnapshot:
    """One shard's state read atomically (StockLayout.snapshot sums the shards)."""
    with script_timer("snapshot"):
        stock, loaded, entries, returned = SNAPSHOT(
            keys=[keys.stock, keys.loaded, keys.log, keys.returned], client=client
        )
    return RedisSnapshot(
        stock=int(stock) if stock is not None else None,
        loaded=int(loaded) if loaded is not None else None,
        log=tuple(parse_log_entry(eid, fields) for eid, fields in entries),
        returned=int(returned),
    )


def warmup_shares(total: int, shards: int) -> list[int]:
    """``total`` split evenly over the shards (the first ones take the remainder)."""
    base, extra = divmod(total, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]
