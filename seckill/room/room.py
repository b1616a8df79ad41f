"""The fair waiting room (docs/WAITING-ROOM.md): services and reads of an activity whose
admission is ``room``.

Everything lives in the stock Redis under the activity's hash tag (stock.keys ``room_*``),
changed by the Lua scripts lua/room_*.lua:

- join: one place per account. Before the start a joiner goes into the pre-queue set; at
  the start the draw turns it into places 1..N in the order :func:`draw_order` computes
  from a seed whose SHA-256 was published before the start (the seed after it); later
  joiners queue first come, first served behind them.
- the tick (lua/room_tick.lua), run by the reads of the room's status, at most once a
  second per web process: no-shows expire, the room closes when the stock is gone and
  reopens when units come back, and "now serving" moves at the admission rate, never past
  the cap on admitted-not-done shoppers nor past the units left.
- an admitted shopper asks for a ticket: signed (django.core.signing, a key derived from
  SECRET_KEY and this module's salt), bound to (activity, shopper, expiry), single use.
  The purchase gate checks it in the web process (:func:`room_ticket_check`): missing,
  forged, someone else's and expired tickets are refused without Redis; a reused one
  costs one Redis call (lua/room_ticket_use.lua), never the stock script.
"""

import hashlib
import json
import logging
import secrets
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.core import signing
from django.utils import timezone

from core.errors import ApiError, busy
from core.memory import ProcessMemory
from seckill.models import Activity, AdmissionMode
from seckill.sale.snapshot import ActivitySnapshot
from stock.breaker import redis_away
from stock.keys import ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import (
    RoomCode,
    RoomTick,
    run_room_join,
    run_room_seal,
    run_room_tick,
    run_room_ticket,
    run_room_ticket_consume,
    run_room_ticket_use,
)

logger = logging.getLogger(__name__)

TICKET_SALT = "seckill.room.ticket"
MAX_TICKET_LENGTH = 400
SEAL_TRIES = 20
DRAW_RULE = "places 1..N = joiners sorted by sha256('<seed>:<id>') as hex; sha256(seed) = commitment"


def room_used(activity: ActivitySnapshot) -> bool:
    return activity.admission_mode == AdmissionMode.ROOM


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _moment(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms is not None else None


def _units_left(shards: int, activity_id: int) -> int | None:
    """What the room's scripts take as the units left: None for one key (the script reads
    the stock and the reserve itself, in its own atomic step); with S > 1 every shard and
    the reserve read here (``StockLayout.units_left``), -1 when unknown — a zero read while
    the shards kept moving is no fact, and the room closes only on a fact."""
    if shards == 1:
        return None
    left = StockLayout(activity_id, shards).units_left(stock_redis())
    if left.units is None or (left.units <= 0 and not left.settled):
        return -1
    return left.units


def _away() -> ApiError:
    return busy("The waiting room cannot be reached just now; please try again in a moment.")


def _not_room(activity: ActivitySnapshot) -> None:
    if not room_used(activity):
        raise ApiError(409, "room_not_used", "This sale has no waiting room: buy directly.")


def prequeue_opens_at(activity: ActivitySnapshot) -> datetime:
    from datetime import timedelta

    return activity.start_at - timedelta(minutes=activity.room_prequeue_minutes)


# --- the draw: a seed committed to before the start, published after it -------------------


def commitment_of(seed: str) -> str:
    """What is published before the start: the SHA-256 of the seed (hex)."""
    return hashlib.sha256(seed.encode()).hexdigest()


def draw_order(seed: str, joiners: list[int]) -> list[int]:
    """The pre-queue's places: the joiners' ids sorted by SHA-256("<seed>:<id>") (hex),
    place 1 first. A deterministic function of the seed and the set of joiners, so anyone
    holding both (GET .../room/draw) computes the same order."""
    return sorted(joiners, key=lambda user_id: (hashlib.sha256(f"{seed}:{user_id}".encode()).hexdigest(), user_id))


def _seed(client, keys: ActivityKeys) -> str:
    """The room's seed, made by the first caller (HSETNX: one seed whoever races)."""
    seed = client.hget(keys.room_state, "seed")
    if seed is None:
        client.hsetnx(keys.room_state, "seed", secrets.token_hex(32))
        seed = client.hget(keys.room_state, "seed")
    return seed.decode()


def room_seal(activity: ActivitySnapshot) -> bool:
    """Make the draw (after the start, on Redis's clock): True once it is made."""
    client, keys = stock_redis(), activity.keys
    seed = _seed(client, keys)
    start_ms = _ms(activity.start_at)
    for _ in range(SEAL_TRIES):
        joiners = [int(u) for u in client.smembers(keys.room_pre)]
        outcome = run_room_seal(client, keys, start_ms=start_ms, seed=seed, order=draw_order(seed, joiners))
        if outcome == 1:
            # Kept with the activity: the room's keys go when the sale closes, the seed stays.
            Activity.objects.filter(pk=activity.id).update(room_seed=seed)
            logger.info("room %s: draw made, %s in the pre-queue", activity.id, len(joiners))
            return True
        if outcome == 0:
            return True
        if outcome == -1:
            return False  # Redis's clock is not at the start yet
    logger.warning("room %s: the pre-queue kept changing during the draw", activity.id)
    return False


# --- joining ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Joined:
    place: int | None  # None: in the pre-queue, the place comes with the draw at the start
    pre_queue: bool


def room_join(activity: ActivitySnapshot, *, user_id: int, now: datetime) -> Joined:
    """Join the room (again: the same place). Raises ApiError 409 room_not_used, 403
    room_not_open / ended, 503 busy."""
    _not_room(activity)
    if activity.phase_at(now) == Activity.Phase.ENDED:
        raise ApiError(403, "ended", "The sale has ended.")
    if now < prequeue_opens_at(activity):
        raise ApiError(403, "room_not_open", f"The waiting room opens at {prequeue_opens_at(activity).isoformat()}.")
    if redis_away():
        raise _away()
    client, keys = stock_redis(), activity.keys
    try:
        _seed(client, keys)  # committed to before anyone can be drawn
        for _ in range(3):
            code, place = run_room_join(client, keys, user_id=user_id, start_ms=_ms(activity.start_at))
            if code == RoomCode.PLACED:
                return Joined(place, False)
            if code == RoomCode.PRE_QUEUE:
                return Joined(None, True)
            if code == RoomCode.NEEDS_DRAW:
                room_seal(activity)
                continue
            raise ApiError(400, "invalid_request", "Not a shopper this room can place.")
    except redis.RedisError as exc:
        logger.warning("room %s: join unanswered, Redis unavailable: %s", activity.id, exc)
        raise _away() from exc
    raise _away()


# --- the room's state: one read (and tick) a second per process -----------------------------


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
    _not_room(activity)
    if not fresh:
        cached = _status.get(activity.id)
        if cached is not None:
            return cached
    status = _room_status_now(activity, now=now)
    _status.put(activity.id, status, getattr(settings, "SECKILL_ROOM_STATUS_TTL", 0.5))
    return status


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
        raise _away()
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
        raise _away() from exc
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
        closed_at=_moment(tick.closed_ms),
        rate=activity.room_rate,
        measured_rate=measured,
        commitment=commitment_of(seed) if seed else None,
        seed=seed if tick.sealed else None,
        server_time=_moment(tick.now_ms) or now,
    )


def _ended_status(activity: ActivitySnapshot, *, now: datetime) -> RoomStatus:
    seed = _published_seed(activity)
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


def _published_seed(activity: ActivitySnapshot) -> str | None:
    """The seed of a sale that has ended: the one the draw kept on the activity."""
    return Activity.objects.filter(pk=activity.id).values_list("room_seed", flat=True).first() or None


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
        units_left=_units_left(shards, activity_id),
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


def estimate_seconds(*, ahead: int, status: RoomStatus) -> int | None:
    """The wait of a shopper with ``ahead`` places before theirs, at the measured rate (the
    configured one until a rate is measured); None while the room is not moving."""
    if ahead <= 0:
        return 0
    if status.state not in ("open", "pre_queue", "drawing"):
        return None
    rate = status.measured_rate if status.measured_rate else status.rate
    return int(-(-ahead // max(rate, 0.01)))


def room_draw(activity: ActivitySnapshot) -> dict:
    """What anyone needs to check the draw: the commitment, and after the start the seed
    and the pre-queue's joiners (sorted); the places are draw_order(seed, joiners)."""
    _not_room(activity)
    if activity.phase_at(timezone.now()) == Activity.Phase.ENDED:
        seed = _published_seed(activity)  # never a new seed once the room's keys are gone
        return {"commitment": commitment_of(seed) if seed else None, "seed": seed, "joiners": None, "rule": DRAW_RULE}
    if redis_away():
        raise _away()
    client, keys = stock_redis(), activity.keys
    try:
        seed = _seed(client, keys)
        sealed = client.hget(keys.room_state, "sealed") == b"1"
        joiners = sorted(int(u) for u in client.smembers(keys.room_pre)) if sealed else []
    except redis.RedisError as exc:
        raise _away() from exc
    return {
        "commitment": commitment_of(seed),
        "seed": seed if sealed else None,
        "joiners": joiners if sealed else None,
        "rule": DRAW_RULE,
    }


# --- tickets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ticket:
    ticket: str
    expires_at: datetime


# room_ticket.lua / room_ticket_use.lua: the ticket was tried by a purchase that did not reserve.
TRIED = 2
# room_ticket_use.lua: a purchase with the ticket reserved (room_ticket_consume.lua).
CONSUMED = -3


def room_ticket_issue(activity: ActivitySnapshot, *, user_id: int) -> Ticket:
    """A ticket for a shopper the room has let in (the same one if asked again, also after a
    purchase with it failed). Raises ApiError: 403 not_joined / not_admitted /
    admission_expired / ticket_used (a purchase with it reserved), 410 sold_out."""
    _not_room(activity)
    if redis_away():
        raise _away()
    try:
        code, first, second = run_room_ticket(
            stock_redis(),
            activity.keys,
            units_left=_units_left(activity.shards, activity.id),
            user_id=user_id,
            nonce=secrets.token_hex(12),
        )
    except redis.RedisError as exc:
        logger.warning("room %s: ticket unanswered, Redis unavailable: %s", activity.id, exc)
        raise _away() from exc
    if code in (RoomCode.TICKET, TRIED):
        payload = {"a": activity.id, "u": user_id, "e": second, "n": first}
        signed = signing.dumps(payload, salt=TICKET_SALT, compress=False)
        return Ticket(signed, _moment(second) or datetime.now(UTC))
    if code == RoomCode.NOT_JOINED:
        raise ApiError(403, "not_joined", "Join the waiting room first.")
    if code == RoomCode.AWAITING_DRAW:
        raise ApiError(403, "not_admitted", "Your place comes with the draw at the start.")
    if code == RoomCode.NOT_YET:
        raise ApiError(403, "not_admitted", f"Not your turn yet: place {first}, now serving {second}.")
    if code == RoomCode.USED:
        raise ApiError(403, "ticket_used", "Your ticket has been used.")
    if code == RoomCode.WINDOW_OVER:
        raise ApiError(403, "admission_expired", "Your time to buy ran out.")
    raise ApiError(410, "sold_out", "Sold out.")


def room_ticket_check(activity: ActivitySnapshot, *, user_id: int, ticket: object, now: datetime) -> str | None:
    """The purchase gate of a waiting-room sale: a ticket for this sale and this shopper,
    not expired (in this process, no Redis, no database), then not consumed (one Redis
    call). Returns the ticket's nonce, for ``room_ticket_consume`` once the purchase has
    reserved; None for a direct sale, which passes untouched. Raises ApiError 403
    ticket_required / ticket_invalid / ticket_not_yours / ticket_expired / ticket_used,
    503 busy."""
    if not room_used(activity):
        return None
    if ticket is None or ticket == "":
        raise ApiError(403, "ticket_required", "This sale has a waiting room: buy with the ticket it gives you.")
    if not isinstance(ticket, str) or len(ticket) > MAX_TICKET_LENGTH:
        raise ApiError(403, "ticket_invalid", "The ticket is not valid.")
    try:
        payload = signing.loads(ticket, salt=TICKET_SALT)
    except (signing.BadSignature, ValueError, UnicodeError):
        raise ApiError(403, "ticket_invalid", "The ticket is not valid.") from None
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), int) for k in ("a", "u", "e")):
        raise ApiError(403, "ticket_invalid", "The ticket is not valid.")
    if not isinstance(payload.get("n"), str):
        raise ApiError(403, "ticket_invalid", "The ticket is not valid.")
    if payload["a"] != activity.id:
        raise ApiError(403, "ticket_invalid", "The ticket is for another sale.")
    if payload["u"] != user_id:
        raise ApiError(403, "ticket_not_yours", "The ticket was given to another shopper.")
    if payload["e"] <= _ms(now):
        raise ApiError(403, "ticket_expired", "Your ticket has expired.")
    if redis_away():
        raise _away()
    try:
        # Tried before and not consumed (a busy, rate-limited or other refusal): good again
        # until its end. Concurrent tries all pass here: the stock script's participant
        # check lets one of them reserve, and that one consumes the ticket.
        used = run_room_ticket_use(stock_redis(), activity.keys, user_id=user_id, nonce=payload["n"])
    except redis.RedisError as exc:
        logger.warning("room %s: ticket not checked, Redis unavailable: %s", activity.id, exc)
        raise _away() from exc
    if used == CONSUMED:
        raise ApiError(403, "ticket_used", "This ticket has been used.")
    if used not in (1, TRIED):
        raise ApiError(403, "ticket_invalid", "The ticket is not valid.")
    return payload["n"]


def room_ticket_consume(activity: ActivitySnapshot, *, user_id: int, nonce: str) -> None:
    """A purchase with the ticket reserved: the ticket is used for good, whatever becomes of
    the order (a cancel returns the unit to the sale, not the ticket to the shopper). If
    Redis fails here the reservation stands; the stock script's participant check still
    refuses a second purchase while the order lives, and the failure is logged."""
    try:
        run_room_ticket_consume(stock_redis(), activity.keys, user_id=user_id, nonce=nonce)
    except redis.RedisError as exc:
        logger.error("room %s: ticket of shopper %s not marked used: %s", activity.id, user_id, exc)


# --- merchant ---------------------------------------------------------------------------


def room_pause(activity_id: int, *, paused: bool) -> None:
    """Stop (or start again) letting shoppers in; places and tickets already given stand."""
    keys = ActivityKeys(activity_id)
    stock_redis().hset(keys.room_state, mapping={"paused": "1" if paused else "0", "ts": int(time.time() * 1000)})
    _status.pop(activity_id)


def room_figures(activity: Activity) -> dict:
    """The admin's figures: waiting, admitted, bought, no-shows, closed at, the seed."""
    from orders.models import Order
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
