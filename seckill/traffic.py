"""Traffic limits shared by the purchase and the waiting room's join: the per-user and
per-address fixed windows (counted in the cache Redis by lua/gates/shopper_gate.lua), and
this web process's memory of the limits a shopper, an address or an activity is over.

A fixed-window limit that says "over" stays over until its window ends, and an empty token
bucket (the admission cap) admits no one before its next token is due: asking Redis again
before then can only bring the same 429. So the verdict is kept in the process until that
moment and answered without a round trip, as the sold-out memory does for 410. The requests
answered from memory are not counted in Redis; the window's count is over already.
"""

import functools
import ipaddress
import logging
import math
import time
from dataclasses import dataclass

import redis

from core.errors import ApiError
from core.memory import ProcessMemory
from stock.breaker import redis_away, redis_breaker
from stock.redis_client import cache_redis
from stock.scripts import (
    GATE_OVER_ADDRESS,
    GATE_OVER_USER,
    GateReply,
    RateLimit,
    TokenLookup,
    run_shopper_gate,
)

logger = logging.getLogger(__name__)

# Limit key -> True until the limit's moment; one per limited shopper: a flood of new ones
# pushes out the oldest, never grows it.
_memory: ProcessMemory[str, bool] = ProcessMemory("seckill.traffic", max_entries=100_000)


def limited_for(key: str) -> float | None:
    """Seconds this limit stays over, or None when nothing is known."""
    until = _memory.expires_at(key)
    if until is None:
        return None
    left = until - time.monotonic()
    if left > 0:
        return left
    _memory.pop(key)
    return None


def limited_remember(key: str, seconds: float) -> None:
    if seconds <= 0:
        return
    _memory.put(key, True, seconds)


def limited_forget() -> None:
    _memory.clear()


# --- the per-shopper and per-address limits --------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def ip_bucket(ip: str) -> str:
    """IPv6 clients get a /64 each, as ISPs hand them out; one bucket per IPv4 address."""
    address = ipaddress.ip_address(ip)
    if address.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return ip


_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def rate_parse(rate: str) -> tuple[int, int] | None:
    """A rate such as "10/s", "600/m" or "100/5m" as (requests, window seconds); None for
    "off" or empty. The form ``seckill.models.validate_rate`` accepts."""
    if not rate or rate == "off":
        return None
    count, _, period = rate.partition("/")
    return int(count), int(period[:-1] or 1) * _PERIOD_SECONDS[period[-1]]


def rate_limited(retry_after: float, detail: str = "Too many requests; please slow down.") -> ApiError:
    return ApiError(429, "rate_limited", detail, retry_after=max(1, math.ceil(retry_after)))


@dataclass(frozen=True)
class TrafficLimits:
    """The per-user and per-address limits of one scope (``purchase:<id>``, ``captcha:<id>``):
    fixed windows counted in the cache Redis by ``lua/shopper_gate.lua``."""

    scope: str
    per_user: RateLimit | None
    per_address: RateLimit | None

    @property
    def any(self) -> bool:
        return self.per_user is not None or self.per_address is not None

    def user_memory(self, user_id: int) -> str:
        return f"{self.scope}:user:{user_id}"


def limits_remembered(limits: TrafficLimits, user_id: int) -> None:
    """Over a limit until its window ends, as this process remembers: 429 without Redis."""
    for memory_key in (limits.user_memory(user_id), limits.per_address and limits.per_address.name):
        left = limited_for(memory_key) if memory_key else None
        if left is not None:
            raise rate_limited(left)


def limits_verdict(limits: TrafficLimits, reply: GateReply, user_id: int) -> None:
    """The gate script's answer: 429 (remembered until the window ends) or on."""
    if reply.over == GATE_OVER_USER:
        memory_key = limits.user_memory(user_id)
    elif reply.over == GATE_OVER_ADDRESS and limits.per_address is not None:  # counted only when it has a limit
        memory_key = limits.per_address.name
    else:
        return
    limited_remember(memory_key, reply.ms_left / 1000)
    raise rate_limited(reply.ms_left / 1000)


def gate_call(
    limits: TrafficLimits,
    *,
    lookup: TokenLookup | None,
    user_id: int | None,
    count: bool,
) -> GateReply | None:
    """One call to the cache Redis: an API token's lookup (``lookup``, made by
    seckill.purchase.token_cache.token_lookup) and/or the count against the limits
    (``count``). None when Redis
    is away: the request goes on (the database fallback that serves purchases meanwhile
    has a strict concurrency cap)."""
    if redis_away():
        return None
    try:
        return run_shopper_gate(
            cache_redis(),
            lookup=lookup,
            user_id=user_id,
            count=count,
            per_user=limits.per_user,
            per_address=limits.per_address,
        )
    except redis.RedisError as exc:
        redis_breaker().error_note()
        logger.warning("rate limits of %s not checked: %s", limits.scope, exc)
        return None


def traffic_limits_check(limits: TrafficLimits, *, user_id: int) -> None:
    """Per-user then per-address limits of a shopper whose id is known."""
    if not limits.any:
        return
    limits_remembered(limits, user_id)
    reply = gate_call(limits, lookup=None, user_id=user_id, count=True)
    if reply is not None:
        limits_verdict(limits, reply, user_id)
