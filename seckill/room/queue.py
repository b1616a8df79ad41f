"""Joining the room (one place per account) and the merchant's pause."""

import logging
import time
from dataclasses import dataclass
from datetime import datetime

import redis

from core.errors import ApiError
from seckill.models import Activity
from seckill.room.draw import new_seed, room_seal
from seckill.room.rules import ms, prequeue_opens_at, require_room, room_away
from seckill.room.status import forget_status
from seckill.sale.snapshot import ActivitySnapshot
from stock.breaker import redis_away
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import RoomCode, run_room_join

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Joined:
    place: int | None  # None: in the pre-queue, the place comes with the draw at the start
    pre_queue: bool


def room_join(activity: ActivitySnapshot, *, user_id: int, now: datetime) -> Joined:
    """Join the room (again: the same place). Raises ApiError 409 room_not_used, 403
    room_not_open / ended, 503 busy."""
    require_room(activity)
    if activity.phase_at(now) == Activity.Phase.ENDED:
        raise ApiError(403, "ended", "The sale has ended.")
    if now < prequeue_opens_at(activity):
        raise ApiError(403, "room_not_open", f"The waiting room opens at {prequeue_opens_at(activity).isoformat()}.")
    if redis_away():
        raise room_away()
    client, keys = stock_redis(), activity.keys
    try:
        # The join keeps this seed when the room has none: committed to before anyone is drawn,
        # with no round trip of its own.
        seed = new_seed()
        for _ in range(3):
            code, place = run_room_join(client, keys, user_id=user_id, start_ms=ms(activity.start_at), seed=seed)
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
        raise room_away() from exc
    raise room_away()


def room_pause(activity_id: int, *, paused: bool) -> None:
    """Stop (or start again) letting shoppers in; places and tickets already given stand."""
    keys = ActivityKeys(activity_id)
    stock_redis().hset(keys.room_state, mapping={"paused": "1" if paused else "0", "ts": int(time.time() * 1000)})
    forget_status(activity_id)
