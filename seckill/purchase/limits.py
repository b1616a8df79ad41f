"""The purchase's limits: an activity's per-user and per-address windows (counted by
seckill.traffic), the failed authentications of an address, and the activity's admission
cap (a token bucket in the stock Redis). Each over-limit verdict is remembered in this
process until its window ends (seckill.traffic), so a shopper hammering a limit costs no
Redis call."""

import logging

import redis
from django.conf import settings

from core.client_address import client_ip
from seckill.sale.snapshot import ActivitySnapshot
from seckill.traffic import (
    TrafficLimits,
    ip_bucket,
    limited_for,
    limited_remember,
    rate_limited,
    rate_parse,
    traffic_limits_check,
)
from stock.breaker import redis_away
from stock.redis_client import stock_redis
from stock.scripts import RateLimit, run_admission

logger = logging.getLogger(__name__)


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
        RateLimit(f"seckill:rl:{scope}:ip:{ip_bucket(ip)}", *ip_rate) if ip_rate and ip else None,
    )


def auth_failure_limit(request) -> RateLimit | None:
    """The failed token authentications of the client's address (SECKILL_AUTH_FAILURES_PER_IP),
    counted by the gate script; None when off or the address is unknown."""
    rate = rate_parse(settings.SECKILL_AUTH_FAILURES_PER_IP)
    ip = client_ip(request) if rate else None
    return RateLimit(f"auth:failed:{ip_bucket(ip)}", *rate) if rate and ip else None


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
