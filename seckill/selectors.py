"""Reads of the flash sale, shaped for the hot path."""

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from .keys import ActivityKeys
from .models import Activity, activity_phase
from .redis_client import stock_redis


@dataclass(frozen=True)
class ActivitySnapshot:
    """What the purchase path needs to know of an activity, immutable and cacheable."""

    id: int
    title: str
    seckill_price: Decimal
    start_at: datetime
    end_at: datetime
    per_user_limit: int
    shards: int
    status: str
    purchase_token: str | None

    def phase_at(self, now: datetime) -> str:
        return activity_phase(status=self.status, start_at=self.start_at, end_at=self.end_at, now=now)

    @property
    def keys(self) -> ActivityKeys:
        return ActivityKeys(self.id)


_SNAPSHOT_FIELDS = [f for f in ActivitySnapshot.__dataclass_fields__]
_absent = object()
_cache: dict[int, tuple[float, object]] = {}
_cache_lock = threading.Lock()


def activity_snapshot_load(activity_id: int) -> ActivitySnapshot | None:
    """One query; no cache."""
    row = Activity.objects.filter(pk=activity_id).values(*_SNAPSHOT_FIELDS).first()
    return ActivitySnapshot(**row) if row else None


def activity_snapshot(activity_id: int) -> ActivitySnapshot | None:
    """The activity from this process's memory, refreshed every SECKILL_ACTIVITY_CACHE_TTL.

    Unknown ids are remembered as absent for the same time, so made-up ids in a flood
    do not each reach the database.
    """
    if not 0 < activity_id < 2**63:  # beyond a bigint: no such row, and no query
        return None
    now = time.monotonic()
    hit = _cache.get(activity_id)
    if hit is not None and hit[0] > now:
        return None if hit[1] is _absent else hit[1]
    snapshot = activity_snapshot_load(activity_id)
    with _cache_lock:
        _cache[activity_id] = (now + settings.SECKILL_ACTIVITY_CACHE_TTL, snapshot or _absent)
    return snapshot


def activity_snapshot_forget(activity_id: int | None = None) -> None:
    with _cache_lock:
        if activity_id is None:
            _cache.clear()
        else:
            _cache.pop(activity_id, None)


def redis_remaining(activity_id: int) -> int | None:
    """Units Redis may still sell, or None when the activity is not warmed."""
    value = stock_redis().get(ActivityKeys(activity_id).stock)
    return int(value) if value is not None else None


def redis_remaining_many(activity_ids: list[int]) -> dict[int, int | None]:
    if not activity_ids:
        return {}
    # One GET per activity in a pipeline, not MGET: the keys live in different Redis
    # Cluster slots, and a cluster pipeline routes each command to its node.
    pipe = stock_redis().pipeline(transaction=False)
    for activity_id in activity_ids:
        pipe.get(ActivityKeys(activity_id).stock)
    values = pipe.execute()
    return {a: (int(v) if v is not None else None) for a, v in zip(activity_ids, values, strict=True)}


def live_activities(now: datetime | None = None):
    now = now or timezone.now()
    return Activity.objects.filter(start_at__lte=now, end_at__gt=now).exclude(status=Activity.Status.ENDED)


def purchase_result(*, activity_id: int, user_id: int) -> tuple[str, object]:
    """The caller's outcome: ("ordered", order) | ("queued", None) | ("failed", reason) | ("none", None)."""
    from orders.models import Order

    orders = list(Order.objects.filter(activity_id=activity_id, user_id=user_id).order_by("-created_at", "-id")[:1])
    latest = orders[0] if orders else None
    if latest is not None and latest.status in Order.LIVE_STATUSES:
        return "ordered", latest
    keys = ActivityKeys(activity_id)
    pipe = stock_redis().pipeline(transaction=False)
    pipe.hget(keys.users, user_id)
    pipe.hget(keys.failed, user_id)
    reservation, failed = pipe.execute()
    if reservation is not None:
        return "queued", None
    if failed is not None:
        return "failed", failed.decode()
    if latest is not None:
        return "ordered", latest  # cancelled; the shopper may try again
    return "none", None
