"""The circuit breaker in front of the stock Redis, one per process.

closed     Redis answers; purchases run the Lua script.
open       ``SECKILL_BREAKER_FAILURES`` consecutive Redis errors opened it; for
           ``SECKILL_BREAKER_RESET`` seconds nobody tries Redis (purchases take the
           database path, see ``seckill.purchase.fallback``).
half_open  the reset time passed: one caller (the probe) is let through to Redis, the
           others answer busy; its success closes the breaker, its failure opens it again.

No re-synchronisation is needed when Redis comes back: the database path sells only the
activity's database reserve, which Redis never holds (``inventory.services``, the two
shares), so whatever this process or any other sold while Redis was away is no unit
Redis counts. Before it closes, the probe writes the database-path shoppers' records into
Redis (``seckill.purchase.fallback.reserve_participants_sync``) so none of them buys a second time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from functools import lru_cache

from django.conf import settings

from core.memory import register_reset
from core.metrics import BREAKER_STATE

logger = logging.getLogger(__name__)


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
        self._error_at = -math.inf
        BREAKER_STATE.set(0)

    @property
    def state(self) -> str:
        return self._state

    @property
    def quiet(self) -> bool:
        """Closed, and no Redis error in this process for ``reset_timeout`` seconds (the
        server's front runs a purchase on its event loop only then: a timeout there would
        hold every connection of the process)."""
        return self._state == self.CLOSED and time.monotonic() >= self._error_at + self.reset_timeout

    def error_note(self) -> None:
        """A Redis error that does not count towards opening the breaker (the cache Redis's)."""
        self._error_at = time.monotonic()

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
        ``database_path_open`` says so, else answer busy)."""
        with self._lock:
            if self._state == self.CLOSED:
                return self.CLOSED
            if self._state == self.OPEN:
                if time.monotonic() < self._opened_at + self.reset_timeout:
                    return None
                self._set(self.HALF_OPEN)
            if self._probing:
                return None
            self._probing = True
            return self.PROBE

    def database_path_open(self) -> bool:
        """May this caller take the database path now? Only while open: a failure below
        the threshold (closed) or a probe in progress (half-open) answers busy."""
        return self._state == self.OPEN

    def record_success(self, ticket: str) -> None:
        with self._lock:
            if ticket == self.PROBE:
                self._probing = False
                self._failures = 0
                self._set(self.CLOSED)
            elif self._state == self.CLOSED:
                self._failures = 0

    def record_failure(self, ticket: str) -> None:
        self.error_note()
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
        failure_threshold=settings.SECKILL_BREAKER_FAILURES,
        reset_timeout=settings.SECKILL_BREAKER_RESET,
    )


@register_reset
def redis_breaker_reset() -> None:
    """Forget the breaker: the next call makes a closed one from the settings as they are
    now (core.memory.forget_all calls this)."""
    redis_breaker.cache_clear()


def redis_away() -> bool:
    """The circuit breaker is not closed: Redis failed just now in this process. Reads
    that can do without Redis then skip it at once rather than wait for a timeout each."""
    return redis_breaker().state != redis_breaker().CLOSED
