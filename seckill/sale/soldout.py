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

# Activity id -> True while Redis's "sold out" is believed.
_memory: ProcessMemory[int, bool] = ProcessMemory("seckill.sale.soldout", max_entries=10_000)


def sold_out_known(activity_id: int) -> bool:
    """True while the memory lasts, and only then. Once it runs out, every request goes
    to Redis until one brings back "none left" again: answering the others from the
    expired memory meanwhile would refuse units that came back. What goes to Redis then
    is the purchases in flight in this process at that moment, once per
    SECKILL_SOLD_OUT_TTL."""
    return bool(_memory.get(activity_id, False))


def sold_out_remember(activity_id: int, *, since: float | None = None) -> None:
    """Remember for SECKILL_SOLD_OUT_TTL counted from ``since`` (``time.monotonic()`` when
    Redis was asked): the bound holds however late a busy process gets here."""
    ttl = settings.SECKILL_SOLD_OUT_TTL - (0.0 if since is None else time.monotonic() - since)
    if ttl <= 0:
        return
    _memory.put(activity_id, True, ttl)


def sold_out_note(activity_id: int, remaining: int, *, since: float | None = None) -> None:
    """What the stock script said is left: remember "none", forget otherwise."""
    if remaining <= 0:
        sold_out_remember(activity_id, since=since)
    elif activity_id in _memory:
        sold_out_forget(activity_id)


def sold_out_forget(activity_id: int | None = None) -> None:
    if activity_id is None:
        _memory.clear()
    else:
        _memory.pop(activity_id)
