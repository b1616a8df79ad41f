"""This web process's memory of the limits a shopper, an address or an activity is over.

A fixed-window rate limit (seckill.gates) that says "over" stays over until its window
ends, and an empty token bucket (the admission cap) admits no one before its next token is
due: asking Redis again before then can only bring the same 429. So the verdict is kept in
the process until that moment and answered without a round trip, as the sold-out memory
does for 410. The requests answered from memory are not counted in Redis; that changes
nothing, as the window's count is over already and a new window starts from zero.
"""

import threading
import time

_until: dict[str, float] = {}
_lock = threading.Lock()
_MAX_ENTRIES = 100_000  # one per limited shopper; a flood of new ones empties it, never grows it


def limited_for(key: str) -> float | None:
    """Seconds this limit stays over, or None when nothing is known."""
    until = _until.get(key)
    if until is None:
        return None
    left = until - time.monotonic()
    if left > 0:
        return left
    with _lock:
        _until.pop(key, None)
    return None


def limited_remember(key: str, seconds: float) -> None:
    if seconds <= 0:
        return
    with _lock:
        if len(_until) >= _MAX_ENTRIES:
            _until.clear()
        _until[key] = time.monotonic() + seconds


def limited_forget() -> None:
    with _lock:
        _until.clear()
