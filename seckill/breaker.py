"""The circuit breaker in front of the stock Redis, one per process.

closed     Redis answers; purchases run the Lua script.
open       ``SECKILL_BREAKER_FAILURES`` consecutive Redis errors opened it; for
           ``SECKILL_BREAKER_RESET`` seconds nobody tries Redis (purchases take the
           database path, see ``seckill.fallback``).
half_open  the reset time passed: one caller (the probe) is let through to Redis; the
           others keep to the database. The probe re-synchronises the stock of the live
           activities from the database before the breaker closes, so units sold
           through the database are not sold a second time through Redis.
"""

from __future__ import annotations

import threading
import time
from functools import lru_cache

from django.conf import settings

from .metrics import BREAKER_STATE


class CircuitBreaker:
    CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"
    _GAUGE = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}

    def __init__(self, *, failure_threshold: int, reset_timeout: float):
        self.failure_threshold = failure_threshold
        self.reset_timeout = reset_timeout
        self._lock = threading.Lock()
        self._state = self.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        BREAKER_STATE.set(0)

    @property
    def state(self) -> str:
        return self._state

    @property
    def probe_due(self) -> bool:
        """Open, and the reset time has passed: the next caller will probe Redis."""
        return self._state == self.OPEN and time.monotonic() >= self._opened_at + self.reset_timeout

    def _set(self, state: str) -> None:
        self._state = state
        BREAKER_STATE.set(self._GAUGE[state])

    def allow(self) -> str | None:
        """May this caller use Redis? Returns None (no: use the fallback), "closed"
        (yes) or "probe" (yes, and it is the one half-open probe)."""
        with self._lock:
            if self._state == self.CLOSED:
                return self.CLOSED
            if self._probing or time.monotonic() < self._opened_at + self.reset_timeout:
                return None
            self._probing = True
            self._set(self.HALF_OPEN)
            return "probe"

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            self._probing = False
            if self._state != self.CLOSED:
                self._set(self.CLOSED)

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            self._probing = False
            if self._state == self.HALF_OPEN or self._failures >= self.failure_threshold:
                self._opened_at = time.monotonic()
                self._set(self.OPEN)


@lru_cache(maxsize=1)
def redis_breaker() -> CircuitBreaker:
    return CircuitBreaker(
        failure_threshold=settings.SECKILL_BREAKER_FAILURES, reset_timeout=settings.SECKILL_BREAKER_RESET
    )
