"""A value every web process reads on the hot path and the database holds (an activity, the
blacklist), in two levels: this process's memory, then a cache Redis shared by all.

A copy in Redis is stored with the generation counter it was built at; every change bumps
the counter (``forget``), so a rebuild that read the database just before a change cannot
leave a stale copy behind. A miss in Redis is rebuilt by one process holding a redis-py
Lock; the others wait for its result instead of querying too. Within a process one thread
per value asks; the others keep the copy that just ran out meanwhile. Values travel as JSON
(a ``Codec``), never pickle: whoever can write to the cache Redis must not run code here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

import redis
from redis.exceptions import LockError

from .errors import DATABASE_AWAY
from .memory import MISSING, ProcessMemory

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class SharedKeys:
    value: str
    gen: str
    lock: str


@dataclass(frozen=True)
class Codec(Generic[T]):
    load: Callable[[], T]  # the database read
    dump: Callable[[T], object]  # value -> JSON-able
    undump: Callable[[Any], T]  # JSON-able -> value
    ttl_of: Callable[[T], float]  # seconds the Redis copy lives


def _json_default(value: object) -> str:
    # Full precision: DjangoJSONEncoder would cut datetimes to milliseconds.
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"cannot cache {type(value).__name__}")


class SharedCache:
    """The two levels for one family of values (``name``: its memories' names).

    ``client``: the cache Redis; ``away``: true while it is known to be away (read the
    database at once); ``rebuild_wait``: seconds a reader waits for another process's
    rebuild before it reads the database itself."""

    def __init__(
        self,
        name: str,
        *,
        client: Callable[[], redis.Redis],
        away: Callable[[], bool],
        rebuild_wait: Callable[[], float],
    ):
        self.client, self.away, self.rebuild_wait = client, away, rebuild_wait
        # Bounded: a flood of made-up ids pushes out the oldest, never grows memory.
        self.local: ProcessMemory[str, Any] = ProcessMemory(f"{name}.local", max_entries=100_000)
        self.flights: ProcessMemory[str, threading.Lock] = ProcessMemory(f"{name}.flights", max_entries=100_000)

    def get(self, name: str, keys: SharedKeys, codec: Codec[T], *, local_ttl: float, shared: bool = True) -> T:
        """The value from this process's memory, else Redis (when ``shared``), else the
        database read under a lock."""
        value = self.local.get(name, MISSING)
        if value is not MISSING:
            return value
        flight = self.flights.get(name)
        if flight is None:
            flight = self.flights.setdefault(name, threading.Lock())
        if not flight.acquire(blocking=False):
            value = self.local.stale(name, MISSING)
            if value is not MISSING:
                return value
            flight.acquire()
        try:
            value = self.local.get(name, MISSING)
            if value is not MISSING:
                return value
            try:
                value = self._shared_or_database(name, keys, codec, shared=shared)
            except DATABASE_AWAY as exc:
                # The database is away too: the copy that ran out beats no answer (a cached
                # shopper keeps buying through Redis); without one the caller answers busy.
                value = self.local.stale(name, MISSING)
                if value is MISSING:
                    raise
                logger.warning("database unavailable, %s served from the last copy: %s", name, exc)
            self.local.put(name, value, local_ttl)
        finally:
            flight.release()
        return value

    def read(self, keys: SharedKeys, codec: Codec[T]) -> tuple[bool, Any]:
        """(fresh, the copy in Redis or None), with no rebuild."""
        return self._read(self.client(), keys, codec)

    def remembered(self, name: str) -> Any:
        """This process's copy, or MISSING (no I/O)."""
        return self.local.get(name, MISSING)

    def forget(self, keys: SharedKeys) -> None:
        """The Redis copy is stale from now on (its generation bumped)."""
        pipe = self.client().pipeline(transaction=False)
        pipe.incr(keys.gen)
        pipe.expire(keys.gen, 7 * 24 * 3600)  # far longer than any copy lives
        pipe.delete(keys.value)
        pipe.execute()

    def _shared_or_database(self, name: str, keys: SharedKeys, codec: Codec[T], *, shared: bool) -> T:
        if not shared or self.away():
            return codec.load()
        try:
            return self._get_or_build(keys, codec)
        except redis.RedisError as exc:
            logger.warning("cache Redis unavailable for %s, reading the database: %s", name, exc)
            return codec.load()

    def _get_or_build(self, keys: SharedKeys, codec: Codec[T]) -> T:
        client = self.client()
        wait = self.rebuild_wait()
        deadline = time.monotonic() + wait
        lock = client.lock(keys.lock, timeout=wait + 5, blocking=False)
        while True:
            fresh, value = self._read(client, keys, codec)
            if fresh:
                return value
            if lock.acquire(blocking=False):
                try:
                    fresh, value = self._read(client, keys, codec)  # built while we asked for the lock
                    return value if fresh else self._rebuild(client, keys, codec)
                finally:
                    with contextlib.suppress(LockError):  # expired meanwhile: another may rebuild too, harmlessly
                        lock.release()
            if time.monotonic() >= deadline:
                logger.warning("cache rebuild of %s took too long; reading the database", keys.value)
                return codec.load()
            time.sleep(0.01)

    @staticmethod
    def _read(client: redis.Redis, keys: SharedKeys, codec: Codec[T]) -> tuple[bool, Any]:
        """(fresh, the copy in Redis: a T, None when there is none)."""
        raw, gen = client.mget([keys.value, keys.gen])
        if raw is None:
            return False, None
        built_at, value = json.loads(raw)
        return built_at == int(gen or 0), codec.undump(value)

    @staticmethod
    def _rebuild(client: redis.Redis, keys: SharedKeys, codec: Codec[T]) -> T:
        """Run the database read and publish its result; the caller holds the lock."""
        gen = int(client.get(keys.gen) or 0)  # read before the database: a change after it makes this copy stale
        value = codec.load()
        raw = json.dumps([gen, codec.dump(value)], default=_json_default)
        client.set(keys.value, raw, px=max(1, int(codec.ttl_of(value) * 1000)))
        return value
