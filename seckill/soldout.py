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
    until = _until.get(activity_id)
    return until is not None and until > time.monotonic()


def sold_out_remember(activity_id: int) -> None:
    ttl = settings.SECKILL_SOLD_OUT_TTL
    if ttl <= 0:
        return
    with _lock:
        _until[activity_id] = time.monotonic() + ttl


def sold_out_forget(activity_id: int | None = None) -> None:
    with _lock:
        if activity_id is None:
            _until.clear()
        else:
            _until.pop(activity_id, None)
