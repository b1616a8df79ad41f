"""Reads of the flash sale, shaped for the hot path."""

import contextlib
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar, cast

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from redis.exceptions import LockError

from core.errors import DATABASE_AWAY, busy
from core.memory import MISSING, ProcessMemory
from seckill.models import Activity, BlacklistEntry, activity_phase
from stock.breaker import redis_away
from stock.keys import USER_PARTITIONS, ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import cache_redis, stock_redis

logger = logging.getLogger(__name__)


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
    # The waiting room (seckill.room.room): "direct" or "room", and the room's settings.
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


# --- two-level cache: this process's memory, then the cache Redis -------------------
#
# A value in Redis is stored with the generation counter it was built at; every change
# bumps the counter (``*_forget``), so a rebuild that read the database just before a
# change cannot leave a stale copy behind. A miss in Redis is rebuilt by one process
# holding a redis-py Lock; the others wait for its result instead of querying too.


def gate_redis() -> redis.Redis:
    """The cache Redis (django-redis ``default``): activity and blacklist copies, captchas,
    the shopper gate; through this thread's own connection (stock.redis_client.cache_redis)."""
    return cache_redis()


@dataclass(frozen=True)
class _SharedKeys:
    value: str
    gen: str
    lock: str


# This process's copies ("activity:<id>", "activity-ceiling", "blacklist"; a value may be
# None: an absent activity) and the lock of the one thread per name that asks for a new
# copy. Bounded: a flood of made-up ids pushes out the oldest, never grows memory. Each
# name's value is of its codec's type.
_local: ProcessMemory[str, Any] = ProcessMemory("seckill.sale.selectors.local", max_entries=100_000)
# The server's front renews the activity's and the blacklist's copies in the last quarter
# of their life, on its thread pool, while they still serve: the requests on its event
# loop never find them missing (each that did waited for the pool to fill them again,
# every second, behind the GIL the pool's thread then held).
RENEW_AHEAD = 0.25
_flights: ProcessMemory[str, threading.Lock] = ProcessMemory("seckill.sale.selectors.flights", max_entries=100_000)


def _json_default(value: object) -> str:
    # Full precision: DjangoJSONEncoder would cut datetimes to milliseconds.
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"cannot cache {type(value).__name__}")


T = TypeVar("T")


@dataclass(frozen=True)
class _Codec(Generic[T]):
    """JSON, not pickle: whoever can write to the cache Redis must not run code here."""

    load: Callable[[], T]  # the database read
    dump: Callable[[T], object]  # value -> JSON-able
    undump: Callable[[Any], T]  # JSON-able -> value
    ttl_of: Callable[[T], float]  # seconds the Redis copy lives


def _shared_read(client: redis.Redis, keys: _SharedKeys, codec: _Codec[T]) -> tuple[bool, Any]:
    """(fresh, the copy in Redis: a T, None when there is none)."""
    raw, gen = client.mget([keys.value, keys.gen])
    if raw is None:
        return False, None
    built_at, value = json.loads(raw)
    return built_at == int(gen or 0), codec.undump(value)


def _shared_rebuild(client: redis.Redis, keys: _SharedKeys, codec: _Codec[T]) -> T:
    """Run the database read and publish its result; the caller holds the lock."""
    gen = int(client.get(keys.gen) or 0)  # read before the database: a change after it makes this copy stale
    value = codec.load()
    raw = json.dumps([gen, codec.dump(value)], default=_json_default)
    client.set(keys.value, raw, px=max(1, int(codec.ttl_of(value) * 1000)))
    return value


def _shared_cached(
    name: str, keys: _SharedKeys, codec: _Codec[T], *, local_ttl: float, shared: bool = True, renew: bool = False
) -> T:
    """The value from this process's memory, else Redis (when ``shared``), else the
    database read under a lock. ``renew``: read again even though the copy still lasts
    (a caller renewing it ahead); while another thread reads, the copy is the answer."""
    value = _local.get(name, MISSING)
    if value is not MISSING and not renew:
        return value
    # One thread per process asks Redis. The others keep using the copy that just ran
    # out, if there is one, and wait for that thread only when there is none.
    flight = _flights.get(name)
    if flight is None:
        flight = _flights.setdefault(name, threading.Lock())
    if not flight.acquire(blocking=False):
        value = _local.stale(name, MISSING)
        if value is not MISSING:
            return value
        flight.acquire()
    try:
        value = _local.get(name, MISSING)
        if value is not MISSING and not renew:
            return value
        try:
            value = _shared_or_database(name, keys, codec, shared=shared)
        except DATABASE_AWAY as exc:
            # The database is away too: the copy that ran out beats no answer (a cached
            # shopper keeps buying through Redis); without one the caller answers busy.
            value = _local.stale(name, MISSING)
            if value is MISSING:
                raise
            logger.warning("database unavailable, %s served from the last copy: %s", name, exc)
        _local.put(name, value, local_ttl)
    finally:
        flight.release()
    return value


def _shared_or_database(name: str, keys: _SharedKeys, codec: _Codec[T], *, shared: bool) -> T:
    # With the breaker open (Redis failed just now) go to the database at once.
    if not shared or redis_away():
        return codec.load()
    try:
        return _shared_get_or_build(keys, codec)
    except redis.RedisError as exc:
        logger.warning("cache Redis unavailable for %s, reading the database: %s", name, exc)
        return codec.load()


def _shared_get_or_build(keys: _SharedKeys, codec: _Codec[T]) -> T:
    client = gate_redis()
    deadline = time.monotonic() + settings.SECKILL_CACHE_REBUILD_WAIT
    lock = client.lock(keys.lock, timeout=settings.SECKILL_CACHE_REBUILD_WAIT + 5, blocking=False)
    while True:
        fresh, value = _shared_read(client, keys, codec)
        if fresh:
            return value
        if lock.acquire(blocking=False):
            try:
                fresh, value = _shared_read(client, keys, codec)  # built while we asked for the lock
                return value if fresh else _shared_rebuild(client, keys, codec)
            finally:
                with contextlib.suppress(LockError):  # expired while we rebuilt: another may rebuild too, harmlessly
                    lock.release()
        if time.monotonic() >= deadline:
            logger.warning("cache rebuild of %s took too long; reading the database", keys.value)
            return codec.load()
        time.sleep(0.01)


def _after_commit(func: Callable[[], None]) -> None:
    """Now, or when the caller's transaction commits (an admin save runs in one): never
    talk to Redis inside a transaction, and never drop a copy that a rebuild could fill
    again from the not-yet-committed old row."""
    transaction.on_commit(func)


def _shared_forget(client: redis.Redis, keys: _SharedKeys) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.incr(keys.gen)
    pipe.expire(keys.gen, 7 * 24 * 3600)  # far longer than any copy lives
    pipe.delete(keys.value)
    pipe.execute()


# --- activities ------------------------------------------------------------------

_SNAPSHOT_FIELDS = [f for f in ActivitySnapshot.__dataclass_fields__]


def _activity_keys(activity_id: int) -> _SharedKeys:
    k = ActivityKeys(activity_id)
    return _SharedKeys(k.snapshot, k.snapshot_gen, k.snapshot_lock)


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
_CEILING_KEYS = _SharedKeys("seckill:activity-ceiling", "seckill:activity-ceiling-gen", "seckill:activity-ceiling-lock")
_CEILING_CODEC = _Codec(
    lambda: Activity.objects.aggregate(top=Max("id"))["top"] or 0,
    lambda value: value,
    lambda value: value,
    lambda _value: settings.SECKILL_ACTIVITY_REDIS_TTL,
)


def activity_id_ceiling() -> int:
    return _shared_cached(
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
    value = _local.get(f"activity:{activity_id}", MISSING)
    if value is not MISSING:  # the hot path: nothing else to build
        return value
    return _activity_cached(activity_id)


def _activity_cached(activity_id: int, *, renew: bool = False) -> ActivitySnapshot | None:
    codec = _Codec(lambda: _activity_lookup(activity_id), _activity_dump, _activity_undump, _activity_ttl)
    return _shared_cached(
        f"activity:{activity_id}",
        _activity_keys(activity_id),
        codec,
        local_ttl=settings.SECKILL_ACTIVITY_CACHE_TTL,
        shared=settings.SECKILL_ACTIVITY_REDIS_TTL > 0,
        renew=renew,
    )


def _renewal_due(name: str, ttl: float) -> bool:
    expires = _local.expires_at(name)
    return expires is not None and 0 < expires - time.monotonic() < ttl * RENEW_AHEAD


def activity_snapshot_renewal_due(activity_id: int) -> bool:
    """This process's copy of the activity still lasts, but is in the last part of its
    life (RENEW_AHEAD): time to renew it (``activity_snapshot_renew``)."""
    return _renewal_due(f"activity:{activity_id}", settings.SECKILL_ACTIVITY_CACHE_TTL)


def activity_snapshot_renew(activity_id: int) -> None:
    """A new copy of the activity in this process's memory, read as ``activity_snapshot``
    reads one when the copy has run out (Redis, else the database), while the old one
    still serves."""
    if 0 < activity_id < 2**63:
        _activity_cached(activity_id, renew=True)


def activity_snapshot_remembered(activity_id: int) -> tuple[bool, ActivitySnapshot | None]:
    """What this process's memory alone says of an activity, with no Redis or database
    call: (known, the snapshot or None when absent). An id above the remembered highest
    id is absent, as ``activity_snapshot`` would find (within the memory's lifetime of a
    new activity, SECKILL_ACTIVITY_CACHE_TTL, as every copy here)."""
    if not 0 < activity_id < 2**63:
        return True, None
    value = _local.get(f"activity:{activity_id}", MISSING)
    if value is not MISSING:
        return True, value
    ceiling = _local.get("activity-ceiling", MISSING)
    if ceiling is not MISSING and activity_id > ceiling:
        return True, None
    return False, None


def activity_snapshot_forget(activity_id: int | None = None) -> None:
    """Drop the copies of an activity after a change (all of this process's, with no id).

    Other processes see the change within SECKILL_ACTIVITY_CACHE_TTL.
    """
    if activity_id is None:
        _local.clear()
        return
    _local.pop(f"activity:{activity_id}")
    _after_commit(lambda: _activity_forget_now(activity_id))


def activity_snapshot_forget_local(activity_id: int) -> None:
    """Drop this process's copy only: the next request reads the shared copy again (which
    whoever changed the activity has dropped already), not the database."""
    _local.pop(f"activity:{activity_id}")


def _activity_forget_now(activity_id: int) -> None:
    _local.pop(f"activity:{activity_id}")
    try:
        client = gate_redis()
        _shared_forget(client, _activity_keys(activity_id))
        fresh, ceiling = _shared_read(client, _CEILING_KEYS, _CEILING_CODEC)
        if not fresh or activity_id > ceiling:  # a new activity: raise the ceiling
            _local.pop("activity-ceiling")
            _shared_forget(client, _CEILING_KEYS)
    except redis.RedisError as exc:
        logger.warning("could not drop the cached copy of activity %s: %s", activity_id, exc)


def activity_snapshot_fill(activity_id: int) -> ActivitySnapshot | None:
    """Forget, then build the copies now (warm-up), so the first buyers find it cached."""
    activity_snapshot_forget(activity_id)
    return activity_snapshot(activity_id)


# --- blacklist and shoppers ---------------------------------------------------------

_BLACKLIST_KEYS = _SharedKeys("seckill:blacklist", "seckill:blacklist-gen", "seckill:blacklist-lock")


@dataclass(frozen=True)
class Blacklist:
    users: frozenset[int] = frozenset()
    devices: frozenset[str] = frozenset()
    addresses: frozenset[str] = frozenset()
    networks: tuple = ()

    def has_ip(self, ip: str | None) -> bool:
        if not ip:
            return False
        if ip in self.addresses:
            return True
        if not self.networks:
            return False
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


def blacklist_load() -> Blacklist:
    now = timezone.now()
    rows = BlacklistEntry.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).values_list(
        "kind", "value", "expires_at"
    )
    users, devices, addresses, networks = set(), set(), set(), []
    for kind, value, _expires in rows:
        if kind == BlacklistEntry.Kind.USER and value.isdigit():
            users.add(int(value))
        elif kind == BlacklistEntry.Kind.DEVICE:
            devices.add(value)
        elif kind == BlacklistEntry.Kind.IP:
            try:
                network = ipaddress.ip_network(value, strict=False)
            except ValueError:
                continue
            if network.num_addresses == 1:
                addresses.add(str(network.network_address))
            else:
                networks.append(network)
    return Blacklist(frozenset(users), frozenset(devices), frozenset(addresses), tuple(networks))


def _blacklist_dump(listed: Blacklist) -> dict:
    return {
        "users": sorted(listed.users),
        "devices": sorted(listed.devices),
        "addresses": sorted(listed.addresses),
        "networks": [str(n) for n in listed.networks],
    }


def _blacklist_undump(data: dict) -> Blacklist:
    return Blacklist(
        frozenset(data["users"]),
        frozenset(data["devices"]),
        frozenset(data["addresses"]),
        tuple(ipaddress.ip_network(n) for n in data["networks"]),
    )


_BLACKLIST_CODEC = _Codec(
    blacklist_load, _blacklist_dump, _blacklist_undump, lambda _value: settings.SECKILL_BLACKLIST_REDIS_TTL
)


def blacklist_remembered() -> bool:
    """The blacklist's copy is in this process's memory: ``blacklist()`` asks nothing."""
    return _local.get("blacklist", MISSING) is not MISSING


def blacklist() -> Blacklist:
    """Every entry in force, from this process's memory (SECKILL_BLACKLIST_CACHE_TTL) or Redis.

    An entry that expires keeps working until the copy is rebuilt (at most
    SECKILL_BLACKLIST_REDIS_TTL).
    """
    return _blacklist_cached()


def _blacklist_cached(*, renew: bool = False) -> Blacklist:
    return _shared_cached(
        "blacklist",
        _BLACKLIST_KEYS,
        _BLACKLIST_CODEC,
        local_ttl=settings.SECKILL_BLACKLIST_CACHE_TTL,
        shared=settings.SECKILL_BLACKLIST_REDIS_TTL > 0,
        renew=renew,
    )


def blacklist_renewal_due() -> bool:
    """The blacklist's copy still lasts, but is in the last part of its life (RENEW_AHEAD)."""
    return _renewal_due("blacklist", settings.SECKILL_BLACKLIST_CACHE_TTL)


def blacklist_renew() -> None:
    """A new copy of the blacklist in this process's memory while the old one still serves."""
    _blacklist_cached(renew=True)


def blacklist_forget() -> None:
    def forget_now() -> None:
        _local.pop("blacklist")
        try:
            _shared_forget(gate_redis(), _BLACKLIST_KEYS)
        except redis.RedisError as exc:  # the Redis copy then lives out its SECKILL_BLACKLIST_REDIS_TTL
            logger.warning("could not drop the cached blacklist: %s", exc)

    _local.pop("blacklist")
    _after_commit(forget_now)


@dataclass(frozen=True)
class ShopperFacts:
    member_level: int
    date_joined: datetime


def _shopper_key(user_id: int) -> str:
    return f"seckill:shopper:{user_id}"


def _shopper_facts_load(user_id: int) -> ShopperFacts | None:
    row = (
        get_user_model().objects.filter(pk=user_id).values_list("date_joined", "shopper_profile__member_level").first()
    )
    facts = ShopperFacts(member_level=row[1] or 0, date_joined=row[0]) if row else None
    return facts


def shopper_facts(user_id: int) -> ShopperFacts | None:
    """What eligibility rules need of a shopper, cached in Redis for SECKILL_SHOPPER_CACHE_TTL;
    from the database alone while that Redis is away."""
    if settings.SECKILL_SHOPPER_CACHE_TTL <= 0 or redis_away():
        return _shopper_facts_load(user_id)
    try:
        raw = gate_redis().get(_shopper_key(user_id))
    except redis.RedisError as exc:
        logger.warning("cache Redis unavailable for shopper %s, reading the database: %s", user_id, exc)
        return _shopper_facts_load(user_id)
    if raw is not None:
        data = json.loads(raw)
        # The date was written by isoformat() (_json_default): it parses.
        return ShopperFacts(data[0], cast(datetime, parse_datetime(data[1]))) if data else None
    facts = _shopper_facts_load(user_id)
    raw = json.dumps([facts.member_level, facts.date_joined] if facts else None, default=_json_default)
    try:
        gate_redis().set(_shopper_key(user_id), raw, ex=settings.SECKILL_SHOPPER_CACHE_TTL)
    except redis.RedisError as exc:  # the answer stands; the next request reads the database again
        logger.warning("shopper %s not cached, Redis unavailable: %s", user_id, exc)
    return facts


def shopper_facts_forget(user_id: int) -> None:
    def forget_now() -> None:
        try:
            gate_redis().delete(_shopper_key(user_id))
        except redis.RedisError as exc:  # the copy then lives out its SECKILL_SHOPPER_CACHE_TTL
            logger.warning("could not drop the cached facts of shopper %s: %s", user_id, exc)

    _after_commit(forget_now)


def activity_shards(activity_id: int) -> int:
    """S of an activity (it changes only well before the start), from the process's activity cache."""
    snapshot = activity_snapshot(activity_id)
    return snapshot.shards if snapshot is not None else 1


def redis_remaining(activity_id: int) -> int | None:
    """Units Redis may still sell (every shard), or None when the activity is not warmed."""
    return StockLayout.of(activity_id).totals(stock_redis())[0]


def units_left_many(activity_ids: list[int]) -> dict[int, int | None]:
    """What pages, the list, the flag and the API show as ``remaining``: the units still for
    sale — Redis's stock and the database reserve not handed over yet — as they were at one
    moment (``StockLayout.units_left``), so a 0 here means what a ``sold_out`` answer means.
    None for an activity that is not warmed, and for every one while Redis is away
    (unknown: a page still shows, without the figure)."""
    if not activity_ids:
        return {}
    unknown: dict[int, int | None] = dict.fromkeys(activity_ids)
    if redis_away():
        return unknown
    client = stock_redis()
    layouts = [StockLayout(a, activity_shards(a)) for a in activity_ids]
    try:
        # One key: the stock and the reserve by one MGET per activity (one hash tag, so one
        # slot), all in one pipeline: the activities' keys live in different Cluster slots.
        single = [layout for layout in layouts if not layout.sharded]
        pipe = client.pipeline(transaction=False)
        for layout in single:
            pipe.mget([layout.keys.stock, layout.keys.reserve])
        values = pipe.execute() if single else []
        left: dict[int, int | None] = {
            layout.activity_id: None if stock is None else int(stock) + int(reserve or 0)
            for layout, (stock, reserve) in zip(single, values, strict=True)
        }
        for layout in layouts:
            if layout.sharded:
                units = layout.units_left(client)
                # A zero read while the shards kept moving is no fact: unknown, not "sold out".
                left[layout.activity_id] = units.units if units.settled or units.units else None
    except redis.RedisError as exc:
        logger.warning("remaining stock unknown, Redis unavailable: %s", exc)
        return unknown
    return {a: (max(0, v) if v is not None else None) for a, v in left.items()}


def live_activities(now: datetime | None = None):
    now = now or timezone.now()
    return Activity.objects.filter(start_at__lte=now, end_at__gt=now).exclude(status=Activity.Status.ENDED)


def purchase_result(*, activity_id: int, user_id: int) -> tuple[str, object]:
    """The caller's outcome: ("ordered", order) | ("queued", None) | ("failed", reason) | ("none", None).

    A live order answers from the database alone; anything else needs Redis, and while
    Redis is away that is ApiError ``busy`` (a reservation may exist: "none" would be a lie).
    """
    from orders.models import Order

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
