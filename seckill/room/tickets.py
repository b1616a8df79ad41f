"""The room's tickets: an admitted shopper asks for one; it is signed (django.core.signing,
a key derived from SECRET_KEY and this module's salt), bound to (activity, shopper,
expiry), single use. The purchase gate checks it in the web process
(:func:`room_ticket_check`): missing, forged, someone else's and expired tickets are
refused without Redis; a reused one costs one Redis call (lua/room_ticket_use.lua), never
the stock script."""

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from django.core import signing

from core.errors import ApiError
from seckill.room.rules import moment, ms, require_room, room_away, room_units_left, room_used
from seckill.sale.snapshot import ActivitySnapshot
from stock.breaker import redis_away
from stock.redis_client import stock_redis
from stock.scripts import RoomCode, run_room_ticket, run_room_ticket_consume, run_room_ticket_use

logger = logging.getLogger(__name__)

# The signing salt: changing it voids every ticket given out.
TICKET_SALT = "seckill.room.ticket"
MAX_TICKET_LENGTH = 400


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
    require_room(activity)
    if redis_away():
        raise room_away()
    try:
        code, first, second = run_room_ticket(
            stock_redis(),
            activity.keys,
            units_left=room_units_left(activity.shards, activity.id),
            user_id=user_id,
            nonce=secrets.token_hex(12),
        )
    except redis.RedisError as exc:
        logger.warning("room %s: ticket unanswered, Redis unavailable: %s", activity.id, exc)
        raise room_away() from exc
    if code in (RoomCode.TICKET, TRIED):
        payload = {"a": activity.id, "u": user_id, "e": second, "n": first}
        signed = signing.dumps(payload, salt=TICKET_SALT, compress=False)
        return Ticket(signed, moment(second) or datetime.now(UTC))
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
    if payload["e"] <= ms(now):
        raise ApiError(403, "ticket_expired", "Your ticket has expired.")
    if redis_away():
        raise room_away()
    try:
        # Tried before and not consumed (a busy, rate-limited or other refusal): good again
        # until its end. Concurrent tries all pass here: the stock script's participant
        # check lets one of them reserve, and that one consumes the ticket.
        used = run_room_ticket_use(stock_redis(), activity.keys, user_id=user_id, nonce=payload["n"])
    except redis.RedisError as exc:
        logger.warning("room %s: ticket not checked, Redis unavailable: %s", activity.id, exc)
        raise room_away() from exc
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
