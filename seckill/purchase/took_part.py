"""This web process's memory of shoppers the stock script called "taken part".

Once the script has reserved for a shopper, or refused them as a duplicate, every further
purchase of theirs in that sale gets 409 ``duplicate`` from it — until their order is
cancelled or their reservation failed, when they may buy again. So for
SECKILL_DUPLICATE_TTL seconds (default 1, at most SECKILL_MEMORY_BOUND) this process
answers 409 itself, before the count against the rate limits and without the script's
round trip: a winner who keeps hammering costs what a sold-out answer costs. No message
clears it, so its lifetime is the bound of what it can get wrong: a shopper whose order
was cancelled may buy again in every process within a second, as the contract says
(docs/API.md: ``duplicate`` is not answered after a cancel that finished before the
request began, beyond the memory's bound).
"""

import time

from django.conf import settings

from core.errors import ApiError
from core.memory import ProcessMemory

# (activity id, user id) -> True while the script's "taken part" is believed. Bounded: a
# sale with more winners than this forgets the oldest, which only costs them the round trip.
_memory: ProcessMemory[tuple[int, int], bool] = ProcessMemory("seckill.purchase.took_part", max_entries=100_000)


def took_part_known(activity_id: int, user_id: int) -> bool:
    return bool(_memory.get((activity_id, user_id), False))


def took_part_remember(activity_id: int, user_id: int, *, since: float | None = None) -> None:
    """Remember for SECKILL_DUPLICATE_TTL counted from ``since`` (``time.monotonic()`` when
    the script was asked): the bound holds however late a busy process gets here."""
    ttl = settings.SECKILL_DUPLICATE_TTL - (0.0 if since is None else time.monotonic() - since)
    if ttl > 0:
        _memory.put((activity_id, user_id), True, ttl)


def took_part_forget(activity_id: int, user_id: int) -> None:
    _memory.pop((activity_id, user_id))


def took_part_refusal() -> ApiError:
    return ApiError(409, "duplicate", "You have already taken part in this sale.")
