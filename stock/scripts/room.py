"""The waiting room's scripts (stock/lua/room/), for seckill.room: joining, the draw's
seal, the tick, and a ticket's issue, use and consume."""

from dataclasses import dataclass

from core.metrics import script_timer

from ..keys import ActivityKeys
from ..redis_client import StockRedis
from .loader import lua_script

ROOM_JOIN = lua_script("room/room_join")
ROOM_SEAL = lua_script("room/room_seal")
ROOM_TICK = lua_script("room/room_tick")
ROOM_TICKET = lua_script("room/room_ticket")
ROOM_TICKET_USE = lua_script("room/room_ticket_use")
ROOM_TICKET_CONSUME = lua_script("room/room_ticket_consume")


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


def run_room_join(client: StockRedis, keys: ActivityKeys, *, user_id: int, start_ms: int, seed: str) -> tuple[int, int]:
    """(code, place): see lua/room/room_join.lua. ``seed``: the room's seed if it has none yet."""
    with script_timer("room_join"):
        code, place = ROOM_JOIN(
            keys=[keys.room_state, keys.room_pre, keys.room_queue, keys.room_places],
            args=[user_id, start_ms, seed],
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
    """(code, nonce or place, window end ms or serving): see lua/room/room_ticket.lua.
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
