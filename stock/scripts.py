"""The Lua scripts of the stock engine, each a `.lua` file loaded once into redis-py's
``Script`` (EVALSHA, reloaded on NOSCRIPT). The client is passed at call time."""

import random
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from core.metrics import script_timer

from .keys import ActivityKeys, claim_pending, claim_value
from .redis_client import StockRedis

_LUA_DIR = Path(__file__).parent / "lua"


class LuaScript(Script):
    """redis-py's Script, sent as EVALSHA straight through ``execute_command``: the
    command method between them costs about as much Python as the rest of the call
    (half of a purchase's two commands). A pipeline's call stays Script's, which has
    the pipeline load its scripts first."""

    def __call__(self, keys=None, args=None, client=None):
        if client is None or isinstance(client, Pipeline):
            return super().__call__(keys, args, client)
        keys = keys or ()
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *(args or ()))
        except NoScriptError:  # not run: a Redis that restarted or another server
            self.sha = client.script_load(self.script)
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *(args or ()))


def _load(name: str) -> LuaScript:
    # Bytes need no client to hash; the client is always passed at call time.
    return LuaScript(None, (_LUA_DIR / f"{name}.lua").read_bytes())  # type: ignore[arg-type]  # None is fine for bytes


PURCHASE = _load("purchase")
RELEASE = _load("release")
WARMUP = _load("warmup")
FREEZE = _load("freeze")
SNAPSHOT = _load("snapshot")
RETURN = _load("return")
CLAIM = _load("claim")
CLAIM_SETTLE = _load("claim_settle")
SHARD_PURCHASE = _load("shard_purchase")
SHARD_RELEASE = _load("shard_release")
SHARD_RETURN = _load("shard_return")
HANDOVER = _load("handover")

# Sharded stock: shards tried per purchase before "sold out" (a random one, then two more).
SHARD_TRIES = 3
ADMISSION = _load("admission")
SHOPPER_GATE = _load("shopper_gate")
TOKEN_FILTER_ADD = _load("token_filter_add")


class ScriptCode:
    RESERVED = 1
    DUPLICATE = -1
    SOLD_OUT = -2
    NOT_WARMED = -3
    INVALID = -4  # an argument failed the script's own checks; nothing was written
    HELD = -5  # too few units in Redis, but the database reserve holds some: hand it over first
    UNSETTLED = -6  # S > 1: the shards kept moving while a purchase looked for a unit (busy)


class ScriptArgumentsInvalid(ValueError):
    """A stock script refused its arguments (ScriptCode.INVALID) before writing anything."""

    def __init__(self, script: str, args: list[str | int]):
        super().__init__(f"stock script {script!r} refused its arguments {args!r}; nothing written")


def _refused(script: str, reply, args: list[str | int]):
    """The script's reply, or ScriptArgumentsInvalid for its invalid-arguments code."""
    if reply == ScriptCode.INVALID:
        raise ScriptArgumentsInvalid(script, args)
    return reply


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
    with script_timer("shard_release"):
        released = SHARD_RELEASE(
            keys=[shard_keys.stock, shard_keys.log, shard_keys.loaded, shard_keys.restocks],
            args=[reservation_id, quantity, "1" if units_back else "0"],
            client=client,
        )
    return bool(released)


def run_shard_return(client: StockRedis, shard_keys: ActivityKeys, *, order_no: str, quantity: int) -> bool:
    with script_timer("shard_return"):
        returned = SHARD_RETURN(
            keys=[shard_keys.stock, shard_keys.returned, shard_keys.restocks], args=[order_no, quantity], client=client
        )
    return bool(returned)


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
    with script_timer("release"):
        released = RELEASE(
            keys=[keys.stock, keys.users, keys.log, keys.failed, keys.loaded],
            args=[
                reservation_id,
                user_id,
                quantity,
                "1" if free_participant else "0",
                reason,
                live_reservation_id,
                "1" if units_back else "0",
            ],
            client=client,
        )
    return bool(released)


def run_return(
    client: StockRedis, keys: ActivityKeys, *, order_no: str, quantity: int, user_id: int, reservation_id: str
) -> bool:
    with script_timer("return"):
        args: list[str | int] = [order_no, quantity, user_id, reservation_id]
        returned = RETURN(keys=[keys.stock, keys.users, keys.returned], args=args, client=client)
    return bool(_refused("return", returned, args))


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
    return bool(_refused("warmup", written, args))


def run_handover(client: StockRedis, keys: ActivityKeys, *, released: int, reserve_left: int | None) -> int:
    """Bring the units the database released to Redis's share into the stock (the
    activity's own tag), and lower the reserve Redis counts to ``reserve_left`` (None:
    leave it); returns the units added (-1: not warmed)."""
    args: list[str | int] = [released, "" if reserve_left is None else reserve_left]
    with script_timer("handover"):
        added = HANDOVER(
            keys=[keys.stock, keys.loaded, keys.handed, keys.reserve, keys.restocks], args=args, client=client
        )
    return int(_refused("handover", added, args))


def run_freeze(client: StockRedis, keys: ActivityKeys, *, expected: int | None, log_length: int) -> bool:
    """Remove a shard's stock key if it still is ``expected`` (a sharded re-warm's first
    step); True if frozen."""
    with script_timer("freeze"):
        frozen = FREEZE(
            keys=[keys.stock, keys.log], args=["" if expected is None else str(expected), log_length], client=client
        )
    return bool(frozen)


def run_admission(client: StockRedis, keys: ActivityKeys, *, rate: int, burst: int) -> tuple[bool, int]:
    """Take one token from the activity's admission bucket: (admitted, ms until one is there)."""
    admitted, wait_ms = ADMISSION(keys=[keys.admission], args=[rate, burst], client=client)
    return bool(admitted), int(wait_ms)


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` requests per fixed window of ``seconds``, counted under ``name``
    (the per-user one: ``name:<user id>``)."""

    name: str
    count: int
    seconds: int


@dataclass(frozen=True)
class GateReply:
    shopper: str | None  # the token's cache entry ("user_id:username:mac"), or the id given; None: not cached
    over: int  # 0, or which limit is over (1 per user, 2 per address, 4 failed authentications); 3: no such token
    ms_left: int  # until that limit's window ends


GATE_OVER_USER, GATE_OVER_ADDRESS, GATE_UNKNOWN_TOKEN, GATE_OVER_FAILURES = 1, 2, 3, 4


@dataclass(frozen=True)
class TokenFilter:
    """A Bloom filter in the cache Redis: ``bits`` (a string of bits) and ``params`` (a
    hash: bits, hashes)."""

    bits: str
    params: str


@dataclass(frozen=True)
class TokenLookup:
    """What the gate script needs to look a token up when the cache holds no entry for it:
    the token's entry, its refused-token entry, the filter and the token's two hashes in
    it, and the failed-authentication counter of the client's address."""

    entry: str
    refused: str
    filter: TokenFilter
    hashes: tuple[int, int]
    refused_ms: int
    failures: RateLimit | None


def run_shopper_gate(
    client: StockRedis,
    *,
    lookup: TokenLookup | None,
    user_id: int | None,
    count: bool,
    per_user: RateLimit | None,
    per_address: RateLimit | None,
    refused: bool = False,
) -> GateReply:
    """The token lookup (``lookup``, when ``user_id`` is None) and the rate limits (when
    ``count``) in one call to the cache Redis; ``refused``: the database refused the token
    (remembered, and counted against the address). See lua/shopper_gate.lua."""
    mode = "refused" if refused else "1" if count else "0"
    args = ["" if user_id is None else user_id, mode]
    args += [per_user.name, per_user.count, per_user.seconds] if per_user else ["", 0, 1]
    args += [per_address.name, per_address.count, per_address.seconds] if per_address else ["", 0, 1]
    if lookup is None:
        keys = ["-"] * 4  # not read when the id is given
        args += ["", 0, 1, 0, 1, 0]
    else:
        keys = [lookup.entry, lookup.refused, lookup.filter.bits, lookup.filter.params]
        failures = lookup.failures
        args += [failures.name, failures.count, failures.seconds] if failures else ["", 0, 1]
        args += [*lookup.hashes, lookup.refused_ms]
    with script_timer("shopper_gate"):
        shopper, over, ms_left = SHOPPER_GATE(keys=keys, args=args, client=client)
    if isinstance(shopper, bytes):
        shopper = shopper.decode()
    return GateReply(None if shopper is None else str(shopper), int(over), int(ms_left))


def run_token_filter_add(client: StockRedis, filters: list[TokenFilter], hashes: list[tuple[int, int]]) -> int:
    """Set the bits of tokens' hashes in each of ``filters`` that exists; returns how many."""
    if not hashes:
        return 0
    keys = [name for f in filters for name in (f.bits, f.params)]
    with script_timer("token_filter_add"):
        return int(TOKEN_FILTER_ADD(keys=keys, args=[h for pair in hashes for h in pair], client=client))


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


# --- the waiting room (seckill.room) -----------------------------------------------------

ROOM_JOIN = _load("room_join")
ROOM_SEAL = _load("room_seal")
ROOM_TICK = _load("room_tick")
ROOM_TICKET = _load("room_ticket")
ROOM_TICKET_USE = _load("room_ticket_use")
ROOM_TICKET_CONSUME = _load("room_ticket_consume")


class RoomCode:
    PLACED = 1
    PRE_QUEUE = 2
    NEEDS_DRAW = 3
    TICKET = 1
    NOT_JOINED = -1
    NOT_YET = -2
    USED = -3
    WINDOW_OVER = -4
    AWAITING_DRAW = -5
    SOLD_OUT = -6


def _int(value) -> int:
    return int(value.decode() if isinstance(value, bytes) else value)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def run_room_join(client: StockRedis, keys: ActivityKeys, *, user_id: int, start_ms: int) -> tuple[int, int]:
    """(code, place): see lua/room_join.lua."""
    with script_timer("room_join"):
        code, place = ROOM_JOIN(
            keys=[keys.room_state, keys.room_pre, keys.room_queue, keys.room_places],
            args=[user_id, start_ms],
            client=client,
        )
    return int(code), int(place)


def run_room_seal(client: StockRedis, keys: ActivityKeys, *, start_ms: int, seed: str, order: list[int]) -> int:
    with script_timer("room_seal"):
        return int(
            ROOM_SEAL(
                keys=[keys.room_state, keys.room_pre, keys.room_queue, keys.room_places],
                args=[start_ms, seed, len(order), *order],
                client=client,
            )
        )


@dataclass(frozen=True)
class RoomTick:
    sealed: bool
    serving: int
    queued: int
    active: int
    noshows: int
    used: int
    closed_ms: int | None
    paused: bool
    stock: int | None
    now_ms: int
    oldest_sample: tuple[int, int] | None  # (ms, serving) about ten seconds ago


def run_room_tick(
    client: StockRedis,
    keys: ActivityKeys,
    *,
    units_left: int | None,
    rate: int,
    cap: int,
    window_ms: int,
    log_key: str | None = None,
):
    """``units_left``: None reads the stock and the reserve in the script (S = 1); S > 1
    gives what the caller read of every shard (-1 unknown)."""
    with script_timer("room_tick"):
        reply = ROOM_TICK(
            keys=[
                keys.room_state,
                keys.room_queue,
                keys.room_active,
                keys.room_admitted,
                keys.stock,
                keys.room_rate_samples,
                keys.reserve,
                *([log_key] if log_key else []),
            ],
            args=[rate, cap, window_ms, "" if units_left is None else units_left],
            client=client,
        )
    sealed, serving, queued, active, noshows, used, closed, paused, stock, now, oldest = reply
    closed, oldest = _text(closed), _text(oldest)
    sample = None
    if oldest:
        ms, _, at = oldest.partition(":")
        sample = (int(ms), int(at))
    return RoomTick(
        sealed=bool(_int(sealed)),
        serving=_int(serving),
        queued=_int(queued),
        active=_int(active),
        noshows=_int(noshows),
        used=_int(used),
        closed_ms=int(closed) if closed else None,
        paused=_text(paused) == "1",
        stock=None if _int(stock) < 0 else _int(stock),
        now_ms=_int(now),
        oldest_sample=sample,
    )


def run_room_ticket(
    client: StockRedis, keys: ActivityKeys, *, units_left: int | None, user_id: int, nonce: str
) -> tuple[int, str, int]:
    """(code, nonce or place, window end ms or serving): see lua/room_ticket.lua.
    ``units_left`` as for ``run_room_tick``."""
    with script_timer("room_ticket"):
        code, first, second = ROOM_TICKET(
            keys=[
                keys.room_state,
                keys.room_places,
                keys.room_active,
                keys.room_tickets,
                keys.room_used,
                keys.stock,
                keys.room_pre,
                keys.reserve,
                keys.room_consumed,
            ],
            args=[user_id, nonce, "" if units_left is None else units_left],
            client=client,
        )
    return int(code), _text(first), int(second)


def run_room_ticket_use(client: StockRedis, keys: ActivityKeys, *, user_id: int, nonce: str) -> int:
    """1 first try, 2 tried before, -1 not the ticket issued, -3 consumed."""
    with script_timer("room_ticket_use"):
        return int(
            ROOM_TICKET_USE(
                keys=[keys.room_tickets, keys.room_used, keys.room_active, keys.room_consumed],
                args=[user_id, nonce],
                client=client,
            )
        )


def run_room_ticket_consume(client: StockRedis, keys: ActivityKeys, *, user_id: int, nonce: str) -> bool:
    """The ticket is used for good (a purchase with it reserved); True the first time."""
    with script_timer("room_ticket_consume"):
        return bool(
            ROOM_TICKET_CONSUME(keys=[keys.room_consumed, keys.room_state], args=[user_id, nonce], client=client)
        )
