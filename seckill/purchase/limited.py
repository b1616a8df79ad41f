"""This web process's memory of the limits a shopper, an address or an activity is over.

A fixed-window rate limit (seckill.purchase.gates) that says "over" stays over until its window
ends, and an empty token bucket (the admission cap) admits no one before its next token is
due: asking Redis again before then can only bring the same 429. So the verdict is kept in
the process until that moment and answered without a round trip, as the sold-out memory
does for 410. The requests answered from memory are not counted in Redis; that changes
nothing, as the window's count is over already and a new window starts from zero.
"""

import time

from core.memory import ProcessMemory

# Limit key -> True until the limit's moment; one per limited shopper: a flood of new ones
# pushes out the oldest, never grows it.
_memory: ProcessMemory[str, bool] = ProcessMemory("seckill.purchase.limited", max_entries=100_000)


def limited_for(key: str) -> float | None:
    """Seconds this limit stays over, or None when nothing is known."""
    until = _memory.expires_at(key)
    if until is None:
        return None
    left = until - time.monotonic()
    if left > 0:
        return left
    _memory.pop(key)
    return None


def limited_remember(key: str, seconds: float) -> None:
    if seconds <= 0:
        return
    _memory.put(key, True, seconds)


def limited_forget() -> None:
    _memory.clear()
