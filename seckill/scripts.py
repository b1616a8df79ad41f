"""The Lua scripts of the stock engine, each a `.lua` file loaded once into redis-py's
``Script`` (EVALSHA, reloaded on NOSCRIPT). The client is passed at call time."""

from dataclasses import dataclass
from pathlib import Path

import redis
from django.conf import settings
from redis.commands.core import Script

from .keys import ActivityKeys
from .metrics import script_timer

_LUA_DIR = Path(__file__).parent / "lua"


def _load(name: str) -> Script:
    # Bytes need no client to hash; the client is always passed at call time.
    return Script(None, (_LUA_DIR / f"{name}.lua").read_bytes())


PURCHASE = _load("purchase")
RELEASE = _load("release")
WARMUP = _load("warmup")
SNAPSHOT = _load("snapshot")
RETURN = _load("return")
ADMISSION = _load("admission")


class ScriptCode:
    RESERVED = 1
    DUPLICATE = -1
    SOLD_OUT = -2
    NOT_WARMED = -3
    INVALID = -4


@dataclass(frozen=True)
class PurchaseReply:
    code: int
    remaining: int
    reservation_id: str
    kick: bool = False  # this reservation set the drain flag: ask a worker to drain the log


def run_purchase(
    client: redis.Redis, keys: ActivityKeys, *, user_id: int, quantity: int, limit: int, shard: int = 0
) -> PurchaseReply:
    with script_timer("purchase"):
        code, remaining, reservation, *kick = PURCHASE(
            keys=[keys.stock, keys.users, keys.log, keys.failed, keys.drain],
            args=[user_id, quantity, limit, shard, settings.SECKILL_DRAIN_KICK_TTL_MS],
            client=client,
        )
    if isinstance(reservation, bytes):
        reservation = reservation.decode()
    return PurchaseReply(int(code), int(remaining), reservation, bool(kick and kick[0]))


def run_release(
    client: redis.Redis,
    keys: ActivityKeys,
    *,
    reservation_id: str,
    user_id: int,
    quantity: int,
    free_participant: bool,
    reason: str,
    live_reservation_id: str = "",
) -> bool:
    with script_timer("release"):
        released = RELEASE(
            keys=[keys.stock, keys.users, keys.log, keys.failed],
            args=[reservation_id, user_id, quantity, "1" if free_participant else "0", reason, live_reservation_id],
            client=client,
        )
    return bool(released)


def run_return(
    client: redis.Redis, keys: ActivityKeys, *, order_no: str, quantity: int, user_id: int, reservation_id: str
) -> bool:
    with script_timer("return"):
        returned = RETURN(
            keys=[keys.stock, keys.users, keys.returned],
            args=[order_no, quantity, user_id, reservation_id],
            client=client,
        )
    return bool(returned)


def run_warmup(client: redis.Redis, keys: ActivityKeys, *, remaining: int, loaded: int, expected: int | None) -> bool:
    """Set the stock if it still is ``expected`` (None: no stock key); True if written."""
    with script_timer("warmup"):
        written = WARMUP(
            keys=[keys.stock, keys.loaded],
            args=[remaining, loaded, "" if expected is None else str(expected)],
            client=client,
        )
    return bool(written)


def run_admission(client: redis.Redis, keys: ActivityKeys, *, rate: int, burst: int) -> tuple[bool, int]:
    """Take one token from the activity's admission bucket: (admitted, ms until one is there)."""
    admitted, wait_ms = ADMISSION(keys=[keys.admission], args=[rate, burst], client=client)
    return bool(admitted), int(wait_ms)


@dataclass(frozen=True)
class LogEntry:
    reservation_id: str
    user_id: int
    quantity: int
    shard: int

    @property
    def timestamp_ms(self) -> int:
        return int(self.reservation_id.split("-", 1)[0])


def parse_log_entry(entry_id: bytes | str, fields) -> LogEntry:
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

    @property
    def warmed(self) -> bool:
        return self.stock is not None

    @property
    def log_units(self) -> int:
        return sum(e.quantity for e in self.log)


def run_snapshot(client: redis.Redis, keys: ActivityKeys) -> RedisSnapshot:
    with script_timer("snapshot"):
        stock, loaded, entries = SNAPSHOT(keys=[keys.stock, keys.loaded, keys.log], client=client)
    return RedisSnapshot(
        stock=int(stock) if stock is not None else None,
        loaded=int(loaded) if loaded is not None else None,
        log=tuple(parse_log_entry(eid, fields) for eid, fields in entries),
    )
