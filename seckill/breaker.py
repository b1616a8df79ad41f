"""The circuit breaker in front of the stock Redis, one per process.

closed     Redis answers; purchases run the Lua script.
open       ``SECKILL_BREAKER_FAILURES`` consecutive Redis errors opened it; for
           ``SECKILL_BREAKER_RESET`` seconds nobody tries Redis (purchases take the
           database path, see ``seckill.fallback``).
half_open  the reset time passed: no new purchase takes the database path; once those
           already on it have committed, one caller (the probe) is let through to Redis,
           the others answer busy. The probe re-synchronises the stock of the live
           activities from the database before the breaker closes, so units sold
           through the database are not sold a second time through Redis.

The ordering guarantee: in this process, every database-path purchase has committed
(or failed) before the probe reads the database, and none starts after it until the
breaker opens again. A purchase takes the database path only while the breaker is open
(``fallback_begin``), so a sale Redis does not know about always has a re-synchronisation
after it. Only the probe's success closes the breaker: a call that started before it
opened proves nothing about the units sold since.
"""

from __future__ import annotations

import threading
import time
from functools import lru_cache

from django.conf import settings

from .metrics import BREAKER_STATE


class CircuitBreaker:
    CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"
    PROBE = "probe"
    _GAUGE = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}

    def __init__(self, *, failure_threshold: int, reset_timeout: float):
        self.failure_threshold = failure_threshold
        self.reset_timeout = reset_timeout
        self._lock = threading.Lock()
        self._state = self.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self._fallbacks = 0  # database-path purchases in flight
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

    def _open(self) -> None:
        self._probing = False
        self._opened_at = time.monotonic()
        self._set(self.OPEN)

    def allow(self) -> str | None:
        """May this caller use Redis? Returns "closed" (yes), "probe" (yes, and it is
        the one half-open probe) or None (no: take the database path if
        ``fallback_begin`` allows it, else answer busy)."""
        with self._lock:
            if self._state == self.CLOSED:
                return self.CLOSED
            if self._state == self.OPEN:
                if time.monotonic() < self._opened_at + self.reset_timeout:
                    return None
                self._set(self.HALF_OPEN)  # from now on no new database-path purchase
            if self._probing or self._fallbacks:
                return None  # a probe runs, or database-path purchases have not committed yet
            self._probing = True
            return self.PROBE

    def fallback_begin(self) -> bool:
        """May this caller take the database path now? Only while open: not while closed
        (a failure below the threshold answers busy, since nothing would re-synchronise
        Redis after the sale), nor half-open. Every True needs its ``fallback_end``."""
        with self._lock:
            if self._state != self.OPEN:
                return False
            self._fallbacks += 1
            return True

    def fallback_end(self) -> None:
        with self._lock:
            self._fallbacks -= 1

    def record_success(self, ticket: str) -> None:
        with self._lock:
            if ticket == self.PROBE:
                self._probing = False
                self._failures = 0
                self._set(self.CLOSED)
            elif self._state == self.CLOSED:
                self._failures = 0

    def record_failure(self, ticket: str) -> None:
        with self._lock:
            if ticket == self.PROBE:
                self._open()
            elif self._state == self.CLOSED:
                self._failures += 1
                if self._failures >= self.failure_threshold:
                    self._open()
            # Already open: a late failure of a call made before must not disturb a probe.


@lru_cache(maxsize=1)
def redis_breaker() -> CircuitBreaker:
    return CircuitBreaker(
        failure_threshold=settings.SECKILL_BREAKER_FAILURES, reset_timeout=settings.SECKILL_BREAKER_RESET
    )
