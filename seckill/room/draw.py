"""The room's draw (docs/WAITING-ROOM.md): a seed whose SHA-256 is published before the
start; at the start the pre-queue becomes places 1..N in the order :func:`draw_order`
computes from the seed, which is published after it, so anyone can check the places."""

import hashlib
import logging
import secrets

import redis
from django.utils import timezone

from seckill.models import Activity
from seckill.room.rules import ms, require_room, room_away
from seckill.sale.snapshot import ActivitySnapshot
from stock.breaker import redis_away
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import run_room_seal

logger = logging.getLogger(__name__)

SEAL_TRIES = 20
DRAW_RULE = "places 1..N = joiners sorted by sha256('<seed>:<id>') as hex; sha256(seed) = commitment"


def commitment_of(seed: str) -> str:
    """What is published before the start: the SHA-256 of the seed (hex)."""
    return hashlib.sha256(seed.encode()).hexdigest()


def draw_order(seed: str, joiners: list[int]) -> list[int]:
    """The pre-queue's places: the joiners' ids sorted by SHA-256("<seed>:<id>") (hex),
    place 1 first. A deterministic function of the seed and the set of joiners, so anyone
    holding both (GET .../room/draw) computes the same order."""
    return sorted(joiners, key=lambda user_id: (hashlib.sha256(f"{seed}:{user_id}".encode()).hexdigest(), user_id))


def new_seed() -> str:
    """A seed candidate: 64 hex digits; the first one written stays the room's (HSETNX)."""
    return secrets.token_hex(32)


def draw_seed(client, keys: ActivityKeys) -> str:
    """The room's seed, made by the first caller (HSETNX: one seed whoever races; a join
    writes one the same way, stock/lua/room/room_join.lua)."""
    seed = client.hget(keys.room_state, "seed")
    if seed is None:
        client.hsetnx(keys.room_state, "seed", new_seed())
        seed = client.hget(keys.room_state, "seed")
    return seed.decode()


def room_seal(activity: ActivitySnapshot) -> bool:
    """Make the draw (after the start, on Redis's clock): True once it is made."""
    client, keys = stock_redis(), activity.keys
    seed = draw_seed(client, keys)
    start_ms = ms(activity.start_at)
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


def published_seed(activity: ActivitySnapshot) -> str | None:
    """The seed of a sale that has ended: the one the draw kept on the activity."""
    return Activity.objects.filter(pk=activity.id).values_list("room_seed", flat=True).first() or None


def room_draw(activity: ActivitySnapshot) -> dict:
    """What anyone needs to check the draw: the commitment, and after the start the seed
    and the pre-queue's joiners (sorted); the places are draw_order(seed, joiners)."""
    require_room(activity)
    if activity.phase_at(timezone.now()) == Activity.Phase.ENDED:
        seed = published_seed(activity)  # never a new seed once the room's keys are gone
        return {"commitment": commitment_of(seed) if seed else None, "seed": seed, "joiners": None, "rule": DRAW_RULE}
    if redis_away():
        raise room_away()
    client, keys = stock_redis(), activity.keys
    try:
        seed = draw_seed(client, keys)
        sealed = client.hget(keys.room_state, "sealed") == b"1"
        joiners = sorted(int(u) for u in client.smembers(keys.room_pre)) if sealed else []
    except redis.RedisError as exc:
        raise room_away() from exc
    return {
        "commitment": commitment_of(seed),
        "seed": seed if sealed else None,
        "joiners": joiners if sealed else None,
        "rule": DRAW_RULE,
    }
