"""This web process's memory of which activities Redis last called sold out.

Once Redis says an activity has nothing left, every later purchase would be answered the
same, so for SECKILL_SOLD_OUT_TTL seconds (default 1) this process answers 410 itself,
without a Redis round trip. The memory is short on purpose: stock that returns (a
cancelled or timed-out order) is on sale again in every process within that time, with no
message to deliver or lose.
"""

import time

from django.conf import settings

from core.memory import ProcessMemory

# Activity id -> True while Redis's "sold out" is believed. An expired entry stays until
# renewed or forgotten: it tells a request that the memory ran out (see sold_out_known).
_memory: ProcessMemory[int, bool] = ProcessMemory("seckill.soldout", max_entries=10_000)


def sold_out_known(activity_id: int) -> bool:
    """True while the memory lasts. When it runs out, one request goes to Redis to ask
    again and the others go on answering from memory meanwhile, so a process with many
    threads does not send them all at once."""
    until = _memory.expires_at(activity_id)
    if until is None:
        return False
    if until > time.monotonic():
        return True
    if not _memory.add(activity_id, True, settings.SECKILL_SOLD_OUT_TTL):
        return True  # another thread is asking
    return False  # this request asks Redis; its answer renews or clears the memory


def sold_out_remember(activity_id: int) -> None:
    ttl = settings.SECKILL_SOLD_OUT_TTL
    if ttl <= 0:
        return
    _memory.put(activity_id, True, ttl)


def sold_out_note(activity_id: int, remaining: int) -> None:
    """What the stock script said is left: remember "none", forget otherwise."""
    if remaining <= 0:
        sold_out_remember(activity_id)
    elif activity_id in _memory:
        sold_out_forget(activity_id)


def sold_out_forget(activity_id: int | None = None) -> None:
    if activity_id is None:
        _memory.clear()
    else:
        _memory.pop(activity_id)
