"""The circuit breaker in front of the stock Redis, one per process.

closed     Redis answers; purchases run the Lua script.
open       ``SECKILL_BREAKER_FAILURES`` consecutive Redis errors opened it; for
           ``SECKILL_BREAKER_RESET`` seconds nobody tries Redis (purchases take the
           database path, see ``seckill.fallback``).
half_open  the reset time passed, or a database-path purchase found that the stock was
           re-synchronised since the breaker opened (below): no new purchase takes the
           database path; once those already on it have committed, one caller (the
           probe) is let through to Redis, the others answer busy. The probe
           re-synchronises the stock of the live activities from the database before
           the breaker closes, so units sold through the database are not sold a second
           time through Redis.

The ordering guarantee within this process: every database-path purchase has committed
(or failed) before the probe reads the database, and none starts after it until the
breaker opens again. A purchase takes the database path only while the breaker is open
(``fallback_begin``), so a sale Redis does not know about always has a re-synchronisation
after it. Only the probe's success closes the breaker: a call that started before it
opened proves nothing about the units sold since.

Across processes (the resync epoch, ``seckill.fallback``): when the breaker opens it reads
the database's resync epoch, which every re-synchronisation bumps. A re-synchronisation
(any process's probe, or beat's) holds off database-path purchases of every process until
it has written Redis, and a database-path purchase that then finds the epoch moved since
its breaker opened sells nothing: its process's breaker turns half-open and the caller
probes Redis instead. So no process sells from the database after another process's
re-synchronisation unless its own breaker opened after that re-synchronisation
(docs/OPERATIONS.md, "the remaining race").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from django.conf import settings

from core.errors import DATABASE_AWAY
from core.memory import register_reset
from core.metrics import BREAKER_STATE

from .models import ResyncEpoch

logger = logging.getLogger(__name__)


class Opening(NamedTuple):
    """What a database-path purchase needs to know of the breaker's current opening."""

    number: int  # the breaker opens again after a failed probe: which opening this is
    epoch: int | None  # the resync epoch read when it opened; None: the read failed


class CircuitBreaker:
    CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"
    PROBE = "probe"
    _GAUGE = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}

    def __init__(self, *, failure_threshold: int, reset_timeout: float, epoch_reader: Callable[[], int | None]):
        self.failure_threshold = failure_threshold
        self.reset_timeout = reset_timeout
        self._epoch_reader = epoch_reader  # the resync epoch now; None when it cannot be read
        self._lock = threading.Lock()
        self._state = self.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self._fallbacks = 0  # database-path purchases in flight
        self._opening = 0
        self._epoch: int | None = None
        self._epoch_known = False  # read since the breaker last opened
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

    def _open(self) -> int:
        self._probing = False
        self._opened_at = time.monotonic()
        self._opening += 1
        self._epoch_known = False
        self._set(self.OPEN)
        return self._opening

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

    def fallback_begin(self) -> Opening | None:
        """May this caller take the database path now? Only while open: not while closed
        (a failure below the threshold answers busy, since nothing would re-synchronise
        Redis after the sale), nor half-open, nor in the moment between opening and
        reading the epoch. Every Opening returned needs its ``fallback_end``."""
        with self._lock:
            if self._state != self.OPEN or not self._epoch_known:
                return None
            self._fallbacks += 1
            return Opening(self._opening, self._epoch)

    def fallback_end(self) -> None:
        with self._lock:
            self._fallbacks -= 1

    def resynced(self, opening: Opening) -> None:
        """A database-path purchase of ``opening`` found the stock re-synchronised since
        it opened: Redis is back for someone. Half-open now, so that the next caller
        probes Redis (after this process's database-path purchases in flight) instead of
        selling what Redis does not know about."""
        with self._lock:
            if self._state == self.OPEN and self._opening == opening.number:
                self._set(self.HALF_OPEN)

    def record_success(self, ticket: str) -> None:
        with self._lock:
            if ticket == self.PROBE:
                self._probing = False
                self._failures = 0
                self._set(self.CLOSED)
            elif self._state == self.CLOSED:
                self._failures = 0

    def record_failure(self, ticket: str) -> None:
        opened = 0
        with self._lock:
            if ticket == self.PROBE:
                opened = self._open()
            elif self._state == self.CLOSED:
                self._failures += 1
                if self._failures >= self.failure_threshold:
                    opened = self._open()
            # Already open: a late failure of a call made before must not disturb a probe.
        if opened:
            # Right after the failure, before any database-path purchase of this opening
            # (fallback_begin waits for it): a re-synchronisation after this read is one
            # this process's database-path sales would not be in. Outside the lock: a query.
            epoch = self._epoch_reader()
            with self._lock:
                if self._opening == opened:
                    self._epoch, self._epoch_known = epoch, True


@lru_cache(maxsize=1)
def redis_breaker() -> CircuitBreaker:
    return CircuitBreaker(
        failure_threshold=settings.SECKILL_BREAKER_FAILURES,
        reset_timeout=settings.SECKILL_BREAKER_RESET,
        epoch_reader=resync_epoch_seen,
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


def resync_epoch() -> int:
    """How many re-synchronisations of the stock Redis there have been (0 before the first)."""
    return ResyncEpoch.objects.filter(pk=1).values_list("value", flat=True).first() or 0


def resync_epoch_seen() -> int | None:
    """The resync epoch for a breaker that has just opened; None when the database does
    not answer (every database-path purchase of that opening then refuses, which is safe:
    its caller probes Redis, and the next opening reads the epoch again)."""
    try:
        return resync_epoch()
    except DATABASE_AWAY as exc:
        logger.warning("breaker opened; the resync epoch could not be read: %s", exc)
        return None
