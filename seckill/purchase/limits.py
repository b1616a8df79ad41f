"""The purchase's traffic limits: the client's address, the per-user and per-address fixed
windows (counted in the cache Redis by lua/shopper_gate.lua), the failed authentications
of an address, and the activity's admission cap (a token bucket in the stock Redis). Each
over-limit verdict is remembered in this process until its window ends (seckill.purchase.
limited), so a shopper hammering a limit costs no Redis call."""

import functools
import ipaddress
import logging
import math
from dataclasses import dataclass

import redis
from django.conf import settings

from core.client_address import client_ip
from core.errors import ApiError
from seckill.purchase.limited import limited_for, limited_remember
from seckill.sale.snapshot import ActivitySnapshot
from stock.breaker import redis_away, redis_breaker
from stock.redis_client import cache_redis, stock_redis
from stock.scripts import (
    GATE_OVER_ADDRESS,
    GATE_OVER_USER,
    GateReply,
    RateLimit,
    TokenLookup,
    run_admission,
    run_shopper_gate,
)

logger = logging.getLogger(__name__)


# --- the per-shopper and per-address limits --------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _ip_bucket(ip: str) -> str:
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


def activity_limits(request, activity: ActivitySnapshot, *, endpoint: str) -> TrafficLimits:
    """The limits of one endpoint of an activity ("purchase", "captcha": counted apart):
    the activity's own rates, else the settings; "off" disables."""
    user_rate = rate_parse(activity.rate_per_user or settings.SECKILL_RATE_PER_USER)
    ip_rate = rate_parse(activity.rate_per_ip or settings.SECKILL_RATE_PER_IP)
    ip = client_ip(request) if ip_rate else None
    scope = f"{endpoint}:{activity.id}"
    return TrafficLimits(
        scope,
        RateLimit(f"seckill:rl:{scope}:user", *user_rate) if user_rate else None,
        RateLimit(f"seckill:rl:{scope}:ip:{_ip_bucket(ip)}", *ip_rate) if ip_rate and ip else None,
    )


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


def auth_failure_limit(request) -> RateLimit | None:
    """The failed token authentications of the client's address (SECKILL_AUTH_FAILURES_PER_IP),
    counted by the gate script; None when off or the address is unknown."""
    rate = rate_parse(settings.SECKILL_AUTH_FAILURES_PER_IP)
    ip = client_ip(request) if rate else None
    return RateLimit(f"auth:failed:{_ip_bucket(ip)}", *rate) if rate and ip else None


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


# --- the activity's admission cap ---------------------------------------------------


def _admission_rate(activity: ActivitySnapshot) -> int:
    return activity.admission_rate if activity.admission_rate is not None else settings.SECKILL_ADMISSION_RATE


_SALE_BUSY = "The sale is very busy; please try again."


def purchase_admission_remembered(activity: ActivitySnapshot) -> None:
    """The cap's verdict while this process remembers the bucket empty: 429 until its next
    token is due, without Redis."""
    if not _admission_rate(activity):
        return
    left = limited_for(f"admission:{activity.id}")
    if left is not None:
        raise rate_limited(left, _SALE_BUSY)  # no token due before then


def purchase_admission_check(activity: ActivitySnapshot) -> None:
    """The activity's global cap: a token bucket in Redis shared by every web process."""
    rate = _admission_rate(activity)
    if not rate:
        return
    purchase_admission_remembered(activity)
    burst = activity.admission_burst or settings.SECKILL_ADMISSION_BURST or rate
    if redis_away():
        return
    try:
        admitted, wait_ms = run_admission(stock_redis(), activity.keys, rate=rate, burst=burst)
    except redis.RedisError as exc:
        logger.warning("admission cap of activity %s not checked: %s", activity.id, exc)
        return  # the stock script meets the same Redis and answers busy
    if not admitted:
        limited_remember(f"admission:{activity.id}", wait_ms / 1000)
        raise rate_limited(wait_ms / 1000, _SALE_BUSY)


def purchase_rate_check(request, *, activity: ActivitySnapshot, user_id: int) -> None:
    traffic_limits_check(activity_limits(request, activity, endpoint="purchase"), user_id=user_id)
    purchase_admission_check(activity)
