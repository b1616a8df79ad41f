"""The room's state as everyone sees it: one read (and tick) of Redis at most twice a
second per web process, whoever polls; the beat's tick of every live room each second;
the wait estimate and the admin's figures."""

import json
import logging
from dataclasses import asdict, dataclass
from datetime import datetime

import redis
from django.conf import settings
from django.utils import timezone

from core.errors import ApiError
from core.memory import ProcessMemory
from orders.models import Order
from seckill.models import Activity, AdmissionMode
from seckill.room.draw import commitment_of, published_seed, room_seal
from seckill.room.rules import moment, prequeue_opens_at, require_room, room_away, room_units_left, room_used
from seckill.sale.snapshot import ActivitySnapshot
from stock.breaker import redis_away
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import RoomTick, run_room_tick

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoomStatus:
    state: str  # not_open | pre_queue | drawing | open | paused | closed | ended
    now_serving: int
    queued: int  # places given so far
    waiting: int  # joined and not yet let in (the pre-queue before the draw)
    admitted_active: int
    noshows: int
    used: int
    pre_queue: int
    sold_out: bool
    closed_at: datetime | None
    rate: int
    measured_rate: float | None
    commitment: str | None
    seed: str | None
    server_time: datetime

    def as_json(self) -> dict:
        body = asdict(self)
        for name in ("closed_at", "server_time"):
            body[name] = body[name].isoformat() if body[name] else None
        return body


_status: ProcessMemory[int, RoomStatus] = ProcessMemory("seckill.room.status", max_entries=10_000)


def room_status(activity: ActivitySnapshot, *, now: datetime, fresh: bool = False) -> RoomStatus:
    """The room as everyone sees it, from this process's memory for SECKILL_ROOM_STATUS_TTL
    (0.5 s): however many shoppers poll, each process ticks the room at most twice a second."""
    require_room(activity)
    if not fresh:
        cached = _status.get(activity.id)
        if cached is not None:
            return cached
    status = _room_status_now(activity, now=now)
    _status.put(activity.id, status, getattr(settings, "SECKILL_ROOM_STATUS_TTL", 0.5))
    return status


def forget_status(activity_id: int) -> None:
    """The next read goes to Redis (after the merchant paused or resumed the room)."""
    _status.pop(activity_id)


# activity id -> (the status, its JSON): made once per status, the same for every caller.
_status_json: ProcessMemory[int, tuple[RoomStatus, bytes]] = ProcessMemory(
    "seckill.room.status_json", max_entries=10_000
)


def status_bytes(activity_id: int, status: RoomStatus) -> bytes:
    """The status as JSON bytes, made once per status."""
    made = _status_json.get(activity_id)
    if made is not None and made[0] is status:
        return made[1]
    body = json.dumps(status.as_json(), separators=(",", ":")).encode()
    _status_json.put(activity_id, (status, body), 5.0)
    return body


def _room_status_now(activity: ActivitySnapshot, *, now: datetime) -> RoomStatus:
    if activity.phase_at(now) == Activity.Phase.ENDED:
        return _ended_status(activity, now=now)  # no tick: the close removed the room's keys for good
    if redis_away():
        raise room_away()
    client, keys = stock_redis(), activity.keys
    try:
        if now >= activity.start_at and client.hget(keys.room_state, "sealed") != b"1":
            room_seal(activity)
        tick = room_tick(activity)
        pipe = client.pipeline(transaction=False)
        pipe.scard(keys.room_pre)
        pipe.hget(keys.room_state, "seed")
        pre_count, seed = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("room %s: status unknown, Redis unavailable: %s", activity.id, exc)
        raise room_away() from exc
    seed = seed.decode() if seed else None
    phase = activity.phase_at(now)
    sold_out = tick.stock is not None and tick.stock <= 0
    if phase == Activity.Phase.ENDED:
        state = "ended"
    elif now < prequeue_opens_at(activity):
        state = "not_open"
    elif not tick.sealed:
        state = "pre_queue" if phase == Activity.Phase.UPCOMING else "drawing"
    elif tick.closed_ms is not None:
        state = "closed"
    elif tick.paused:
        state = "paused"
    else:
        state = "open"
    measured = None
    if tick.oldest_sample is not None and tick.now_ms - tick.oldest_sample[0] >= 1000:
        measured = round((tick.serving - tick.oldest_sample[1]) * 1000 / (tick.now_ms - tick.oldest_sample[0]), 2)
    waiting = (tick.queued - tick.serving) if tick.sealed else int(pre_count)
    return RoomStatus(
        state=state,
        now_serving=tick.serving,
        queued=tick.queued,
        waiting=max(0, waiting),
        admitted_active=tick.active,
        noshows=tick.noshows,
        used=tick.used,
        pre_queue=int(pre_count),
        sold_out=sold_out,
        closed_at=moment(tick.closed_ms),
        rate=activity.room_rate,
        measured_rate=measured,
        commitment=commitment_of(seed) if seed else None,
        seed=seed if tick.sealed else None,
        server_time=moment(tick.now_ms) or now,
    )


def _ended_status(activity: ActivitySnapshot, *, now: datetime) -> RoomStatus:
    seed = published_seed(activity)
    return RoomStatus(
        state="ended",
        now_serving=0,
        queued=0,
        waiting=0,
        admitted_active=0,
        noshows=0,
        used=0,
        pre_queue=0,
        sold_out=False,
        closed_at=None,
        rate=activity.room_rate,
        measured_rate=None,
        commitment=commitment_of(seed) if seed else None,
        seed=seed,
        server_time=now,
    )


def room_tick(activity: ActivitySnapshot) -> RoomTick:
    return _tick(
        activity.id,
        shards=activity.shards,
        rate=activity.room_rate,
        cap=activity.room_cap,
        window_seconds=activity.room_window_seconds,
    )


def _tick(activity_id: int, *, shards: int, rate: int, cap: int, window_seconds: int) -> RoomTick:
    keys = ActivityKeys(activity_id)
    return run_room_tick(
        stock_redis(),
        keys,
        units_left=room_units_left(shards, activity_id),
        rate=max(1, rate),
        cap=cap,
        window_ms=window_seconds * 1000,
        # S = 1: the close is dated by the reservation that took the last unit.
        log_key=keys.log if shards == 1 else None,
    )


def room_ticks(now: datetime | None = None) -> dict[int, int]:
    """Beat, every second: tick every live waiting room (one Lua call each), so the room
    lets shoppers in and closes at the sell-out with nobody polling; make the draw of a
    room that has started without one. Returns activity id -> now serving."""
    from seckill.sale.snapshot import activity_snapshot, live_activities

    live = (
        live_activities(now)
        .filter(admission_mode=AdmissionMode.ROOM, status=Activity.Status.WARMED)
        .values_list("pk", "shards", "room_rate", "room_cap", "room_window_seconds")
    )
    serving = {}
    for activity_id, shards, rate, cap, window in live:
        fields = {"shards": shards, "rate": rate, "cap": cap, "window_seconds": window}
        try:
            tick = _tick(activity_id, **fields)
            if not tick.sealed:
                snapshot = activity_snapshot(activity_id)
                if snapshot is None or not room_seal(snapshot):
                    continue
                tick = _tick(activity_id, **fields)
        except redis.RedisError as exc:
            logger.warning("room %s: not ticked, Redis unavailable: %s", activity_id, exc)
            continue
        serving[activity_id] = tick.serving
    return serving


@dataclass(frozen=True)
class ShopperStanding:
    """One shopper in the room, read without joining them (a reload, another tab)."""

    joined: bool
    place: int | None  # None: not joined, or in the pre-queue until the draw
    pre_queue: bool
    order: Order | None  # their live order in this sale (pending or paid)


def room_standing(activity: ActivitySnapshot, *, user_id: int) -> ShopperStanding:
    """Where the shopper stands: their place (two Redis reads, nothing written) and their
    live order (the database). Raises ApiError 409 room_not_used, 503 busy."""
    require_room(activity)
    order = (
        Order.objects.filter(activity_id=activity.id, user_id=user_id, status__in=Order.LIVE_STATUSES)
        .order_by("-created_at", "-id")
        .first()
    )
    if redis_away():
        raise room_away()
    pipe = stock_redis().pipeline(transaction=False)
    pipe.hget(activity.keys.room_places, str(user_id))
    pipe.sismember(activity.keys.room_pre, str(user_id))
    try:
        place, pre = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("room %s: standing unknown, Redis unavailable: %s", activity.id, exc)
        raise room_away() from exc
    place = int(place) if place is not None else None
    pre_queue = place is None and bool(pre)
    return ShopperStanding(joined=place is not None or pre_queue, place=place, pre_queue=pre_queue, order=order)


def estimate_seconds(*, ahead: int, status: RoomStatus) -> int | None:
    """The wait of a shopper with ``ahead`` places before theirs, at the measured rate (the
    configured one until a rate is measured); None while the room is not moving."""
    if ahead <= 0:
        return 0
    if status.state not in ("open", "pre_queue", "drawing"):
        return None
    rate = status.measured_rate if status.measured_rate else status.rate
    return int(-(-ahead // max(rate, 0.01)))


def room_figures(activity: Activity) -> dict:
    """The admin's figures: waiting, admitted, bought, no-shows, closed at, the seed."""
    from seckill.sale.snapshot import activity_snapshot

    snapshot = activity_snapshot(activity.pk)
    figures: dict[str, object] = {"mode": activity.admission_mode}
    if snapshot is None or not room_used(snapshot):
        return figures
    bought = Order.objects.filter(activity_id=activity.pk, status__in=Order.LIVE_STATUSES).count()
    try:
        status = room_status(snapshot, now=timezone.now(), fresh=True)
    except ApiError:
        return {**figures, "bought": bought, "seed": activity.room_seed or None, "unknown": True}
    figures.update(
        waiting=status.waiting,
        admitted=status.now_serving,
        admitted_active=status.admitted_active,
        tickets_used=status.used,
        bought=bought,
        noshows=status.noshows,
        closed_at=status.closed_at,
        state=status.state,
        seed=status.seed or activity.room_seed or None,
        commitment=status.commitment,
        measured_rate=status.measured_rate,
    )
    return figures
