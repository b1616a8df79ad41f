"""The shopper's outcome in a sale (``GET /api/activities/<id>/result``)."""

import logging

import redis

from core.errors import busy
from orders.models import Order
from stock.breaker import redis_away
from stock.keys import USER_PARTITIONS, ActivityKeys
from stock.redis_client import stock_redis

logger = logging.getLogger(__name__)


def purchase_result(*, activity_id: int, user_id: int) -> tuple[str, object]:
    """The caller's outcome: ("ordered", order) | ("queued", None) | ("failed", reason) | ("none", None).

    A live order answers from the database alone; anything else needs Redis, and while
    Redis is away that is ApiError ``busy`` (a reservation may exist: "none" would be a lie).
    """
    orders = list(Order.objects.filter(activity_id=activity_id, user_id=user_id).order_by("-created_at", "-id")[:1])
    latest = orders[0] if orders else None
    if latest is not None and latest.status in Order.LIVE_STATUSES:
        return "ordered", latest
    # The activity's own hashes (S = 1) and the shopper's partition (S > 1): no database read for S.
    keys = ActivityKeys(activity_id)
    part = keys.user_partition(user_id, USER_PARTITIONS)
    away = busy("The result cannot be read just now; please try again in a moment.")
    if redis_away():
        raise away
    pipe = stock_redis().pipeline(transaction=False)
    for hashes in (keys, part):
        pipe.hget(hashes.users, user_id)
        pipe.hget(hashes.failed, user_id)
    try:
        own_reservation, own_failed, part_reservation, part_failed = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("result of shopper %s in activity %s unknown, Redis unavailable: %s", user_id, activity_id, exc)
        raise away from exc
    reservation = own_reservation if own_reservation is not None else part_reservation
    failed = own_failed if own_failed is not None else part_failed
    if reservation is not None:
        return "queued", None
    if failed is not None:
        return "failed", failed.decode()
    if latest is not None:
        return "ordered", latest  # cancelled; the shopper may try again
    return "none", None
