"""What the purchase path knows of an activity (``ActivitySnapshot``), from this process's
memory, else the cache Redis, else one database read (core.shared_cache): the activity's
copies, the highest activity id (an id above it is absent without a query), and which
activities are live.

A copy in this process lives SECKILL_ACTIVITY_CACHE_TTL (at most the memory's bound), the
shared one SECKILL_ACTIVITY_REDIS_TTL, an absent id SECKILL_ACTIVITY_ABSENT_TTL; every change
of an activity drops them (``activity_snapshot_forget``), after its transaction commits.
"""

import logging
from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.errors import ApiError
from core.memory import MISSING
from core.shared_cache import Codec, SharedCache, SharedKeys
from seckill.models import Activity, activity_phase
from stock.breaker import redis_away
from stock.keys import ActivityKeys
from stock.redis_client import cache_redis

logger = logging.getLogger(__name__)


def activity_absent() -> ApiError:
    """The answer for an activity that does not exist (the same for everyone)."""
    return ApiError(404, "not_found", "No such activity.")


# The activities' copies and the highest id: this process's memory, then the cache Redis.
_cache = SharedCache(
    "seckill.sale.snapshot",
    client=cache_redis,
    away=redis_away,
    rebuild_wait=lambda: settings.SECKILL_CACHE_REBUILD_WAIT,
)


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
    rate_per_user: str = ""
    rate_per_ip: str = ""
    admission_rate: int | None = None
    admission_burst: int | None = None
    min_member_level: int | None = None
    min_account_age_days: int | None = None
    captcha_required: bool = False
    # The waiting room (seckill.room): "direct" or "room", and the room's settings.
    admission_mode: str = "direct"
    room_prequeue_minutes: int = 15
    room_rate: int = 20
    room_cap: int = 200
    room_window_seconds: int = 120

    def phase_at(self, now: datetime) -> str:
        return activity_phase(status=self.status, start_at=self.start_at, end_at=self.end_at, now=now)

    @property
    def keys(self) -> ActivityKeys:
        return ActivityKeys(self.id)


_SNAPSHOT_FIELDS = [f for f in ActivitySnapshot.__dataclass_fields__]


def _activity_keys(activity_id: int) -> SharedKeys:
    k = ActivityKeys(activity_id)
    return SharedKeys(k.snapshot, k.snapshot_gen, k.snapshot_lock)


def _activity_ttl(snapshot: ActivitySnapshot | None) -> float:
    return settings.SECKILL_ACTIVITY_REDIS_TTL if snapshot is not None else settings.SECKILL_ACTIVITY_ABSENT_TTL


def _activity_dump(snapshot: ActivitySnapshot | None) -> dict | None:
    return asdict(snapshot) if snapshot is not None else None


def _activity_undump(data: dict | None) -> ActivitySnapshot | None:
    if data is None:
        return None
    data = dict(data)
    data["seckill_price"] = Decimal(data["seckill_price"])
    data["start_at"] = parse_datetime(data["start_at"])
    data["end_at"] = parse_datetime(data["end_at"])
    return ActivitySnapshot(**data)


def activity_snapshot_load(activity_id: int) -> ActivitySnapshot | None:
    """One query; no cache."""
    row = Activity.objects.filter(pk=activity_id).values(*_SNAPSHOT_FIELDS).first()
    return ActivitySnapshot(**row) if row else None


# The highest activity id, cached: an id above it is absent without a query of its own,
# so a flood of made-up ids costs one query per ceiling lifetime, not one per id.
_CEILING_KEYS = SharedKeys("seckill:activity-ceiling", "seckill:activity-ceiling-gen", "seckill:activity-ceiling-lock")
_CEILING_CODEC = Codec(
    lambda: Activity.objects.aggregate(top=Max("id"))["top"] or 0,
    lambda value: value,
    lambda value: value,
    lambda _value: settings.SECKILL_ACTIVITY_REDIS_TTL,
)


def activity_id_ceiling() -> int:
    return _cache.get(
        "activity-ceiling",
        _CEILING_KEYS,
        _CEILING_CODEC,
        local_ttl=settings.SECKILL_ACTIVITY_CACHE_TTL,
        shared=settings.SECKILL_ACTIVITY_REDIS_TTL > 0,
    )


def _activity_lookup(activity_id: int) -> ActivitySnapshot | None:
    if activity_id > activity_id_ceiling():
        return None
    return activity_snapshot_load(activity_id)


def activity_snapshot(activity_id: int) -> ActivitySnapshot | None:
    """The activity from this process's memory (SECKILL_ACTIVITY_CACHE_TTL), else from the
    cache Redis (SECKILL_ACTIVITY_REDIS_TTL), else one database query under a lock.

    Unknown ids are remembered as absent too (SECKILL_ACTIVITY_ABSENT_TTL in Redis), so
    made-up ids in a flood do not each reach the database.
    """
    if not 0 < activity_id < 2**63:  # beyond a bigint: no such row, and no query
        return None
    value = _cache.remembered(f"activity:{activity_id}")
    if value is not MISSING:  # the hot path: nothing else to build
        return value
    codec = Codec(lambda: _activity_lookup(activity_id), _activity_dump, _activity_undump, _activity_ttl)
    return _cache.get(
        f"activity:{activity_id}",
        _activity_keys(activity_id),
        codec,
        local_ttl=settings.SECKILL_ACTIVITY_CACHE_TTL,
        shared=settings.SECKILL_ACTIVITY_REDIS_TTL > 0,
    )


def activity_snapshot_remembered(activity_id: int) -> tuple[bool, ActivitySnapshot | None]:
    """What this process's memory alone says of an activity, with no Redis or database
    call: (known, the snapshot or None when absent). An id above the remembered highest
    id is absent, as ``activity_snapshot`` would find (within the memory's lifetime of a
    new activity, SECKILL_ACTIVITY_CACHE_TTL, as every copy here)."""
    if not 0 < activity_id < 2**63:
        return True, None
    value = _cache.local.get(f"activity:{activity_id}", MISSING)
    if value is not MISSING:
        return True, value
    ceiling = _cache.local.get("activity-ceiling", MISSING)
    if ceiling is not MISSING and activity_id > ceiling:
        return True, None
    return False, None


def activity_snapshot_forget(activity_id: int | None = None) -> None:
    """Drop the copies of an activity after a change (all of this process's, with no id).

    Other processes see the change within SECKILL_ACTIVITY_CACHE_TTL.
    """
    if activity_id is None:
        _cache.local.clear()
        return
    _cache.local.pop(f"activity:{activity_id}")
    transaction.on_commit(lambda: _activity_forget_now(activity_id))


def activity_snapshot_forget_local(activity_id: int) -> None:
    """Drop this process's copy only: the next request reads the shared copy again (which
    whoever changed the activity has dropped already), not the database."""
    _cache.local.pop(f"activity:{activity_id}")


def _activity_forget_now(activity_id: int) -> None:
    _cache.local.pop(f"activity:{activity_id}")
    try:
        _cache.forget(_activity_keys(activity_id))
        fresh, ceiling = _cache.read(_CEILING_KEYS, _CEILING_CODEC)
        if not fresh or activity_id > ceiling:  # a new activity: raise the ceiling
            _cache.local.pop("activity-ceiling")
            _cache.forget(_CEILING_KEYS)
    except redis.RedisError as exc:
        logger.warning("could not drop the cached copy of activity %s: %s", activity_id, exc)


def activity_snapshot_fill(activity_id: int) -> ActivitySnapshot | None:
    """Forget, then build the copies now (warm-up), so the first buyers find it cached."""
    activity_snapshot_forget(activity_id)
    return activity_snapshot(activity_id)


def activity_shards(activity_id: int) -> int:
    """S of an activity (it changes only well before the start), from the process's activity cache."""
    snapshot = activity_snapshot(activity_id)
    return snapshot.shards if snapshot is not None else 1


def live_activities(now: datetime | None = None):
    now = now or timezone.now()
    return Activity.objects.filter(start_at__lte=now, end_at__gt=now).exclude(status=Activity.Status.ENDED)
