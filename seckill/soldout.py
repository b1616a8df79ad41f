"""This web process's memory of which activities Redis last called sold out.

Once Redis says an activity has nothing left, every later purchase would be answered the
same, so for SECKILL_SOLD_OUT_TTL seconds (default 1) this process answers 410 itself,
without a Redis round trip. The memory is short on purpose: stock that returns (a
cancelled or timed-out order) is on sale again in every process within that time, with no
message to deliver or lose.
"""

import threading
import time

from django.conf import settings

_until: dict[int, float] = {}
_lock = threading.Lock()


def sold_out_known(activity_id: int) -> bool:
    """True while the memory lasts. When it runs out, one request goes to Redis to ask
    again and the others go on answering from memory meanwhile, so a process with many
    threads does not send them all at once."""
    until = _until.get(activity_id)
    if until is None:
        return False
    now = time.monotonic()
    if until > now:
        return True
    with _lock:
        if _until.get(activity_id, now) > now:
            return True  # another thread is asking
        _until[activity_id] = now + settings.SECKILL_SOLD_OUT_TTL
    return False  # this request asks Redis; its answer renews or clears the memory


def sold_out_remember(activity_id: int) -> None:
    ttl = settings.SECKILL_SOLD_OUT_TTL
    if ttl <= 0:
        return
    with _lock:
        _until[activity_id] = time.monotonic() + ttl


def sold_out_note(activity_id: int, remaining: int) -> None:
    """What the stock script said is left: remember "none", forget otherwise."""
    if remaining <= 0:
        sold_out_remember(activity_id)
    elif activity_id in _until:
        sold_out_forget(activity_id)


def sold_out_forget(activity_id: int | None = None) -> None:
    with _lock:
        if activity_id is None:
            _until.clear()
        else:
            _until.pop(activity_id, None)
