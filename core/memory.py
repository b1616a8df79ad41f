"""This process's memories: one small cache type for everything a process keeps to
itself (the token memory, the sold-out and rate-limit verdicts, activity snapshots,
rendered pages), and one place that forgets them all.

A ``ProcessMemory`` holds at most ``max_entries`` entries and about ``max_bytes`` bytes
(keys and values as ``size_of`` counts them: ``sys.getsizeof`` of each, plus each entry's
own bookkeeping, unless the memory says better), each with an optional expiry on the
monotonic clock. A read takes no lock (one dict lookup and one clock compare: it
is on the purchase path); writes take the memory's lock. A full memory drops its oldest
entry (the one written longest ago) to make room, so a flood of new keys cannot grow it
and pushes out only what has gone longest without a write.

An expired entry is not dropped when read: ``stale`` still returns it (a copy that ran
out beats no answer while its source is away), ``expires_at`` tells when it ran out, and
it leaves when overwritten, popped or pushed out.

Every memory registers itself; singletons kept otherwise (a ``functools.lru_cache``'d
client) register how to reset them with ``register_reset``. ``forget_all()`` empties
and resets everything registered: the tests' clean slate, and nothing else's business.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from math import inf
from time import monotonic
from typing import Any, Generic, TypeVar

__all__ = ["MISSING", "ProcessMemory", "forget_all", "memories", "register_reset", "resets", "unregister_reset"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R", bound=Callable[[], object])


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""A default for ``get`` and ``stale`` that no stored value can be (a memory may store None)."""


# What an entry costs besides its key and value: its OrderedDict node and the
# (expiry, value) tuple with its float (measured with tracemalloc: ~150 bytes).
ENTRY_OVERHEAD = 160
# The byte bound of a memory that gives none: entries this size on average.
DEFAULT_ENTRY_BYTES = 512


def shallow_size(key: object, value: object) -> int:
    """The default ``size_of``: the key and the value themselves (not what they point to),
    right for the small keys and values most memories hold."""
    return sys.getsizeof(key) + sys.getsizeof(value) + ENTRY_OVERHEAD


class ProcessMemory(Generic[K, V]):
    """A bounded, thread-safe map of this process with an expiry per entry.

    ``ttl`` is the default lifetime of an entry in seconds (None: no expiry); ``put``
    may give each entry its own. ``max_bytes`` (default ``max_entries`` times
    DEFAULT_ENTRY_BYTES) bounds the sum of ``size_of(key, value)`` over the entries.
    """

    __slots__ = ("__weakref__", "_bytes", "_entries", "_lock", "max_bytes", "max_entries", "name", "size_of", "ttl")

    def __init__(
        self,
        name: str,
        max_entries: int,
        ttl: float | None = None,
        *,
        max_bytes: int | None = None,
        size_of: Callable[[Any, Any], int] = shallow_size,
    ):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.name = name
        self.max_entries = max_entries
        self.max_bytes = max_bytes if max_bytes is not None else max_entries * DEFAULT_ENTRY_BYTES
        self.size_of = size_of
        self.ttl = ttl
        self._bytes = 0
        # OrderedDict, not dict: dropping the oldest entry of a dict again and again
        # costs a scan over the holes the earlier drops left (measured: ~100 µs each at
        # 100k entries); popitem(last=False) is O(1). A lookup costs the same.
        self._entries: OrderedDict[K, tuple[float, V, int]] = OrderedDict()  # (expiry, value, size)
        self._lock = threading.Lock()
        _register(self)

    def __repr__(self) -> str:
        return f"<ProcessMemory {self.name!r} {len(self._entries)}/{self.max_entries}>"

    # --- reads: no lock --------------------------------------------------------------

    def get(self, key: K, default: Any = None) -> V | Any:
        """The value while it lasts, else ``default``."""
        hit = self._entries.get(key)
        if hit is not None and hit[0] > monotonic():
            return hit[1]
        return default

    def stale(self, key: K, default: Any = None) -> V | Any:
        """The value even if it has expired, else ``default``."""
        hit = self._entries.get(key)
        return default if hit is None else hit[1]

    def expires_at(self, key: K) -> float | None:
        """When the entry runs out (``time.monotonic()``; ``math.inf``: never), even if
        that is past; None when there is no entry."""
        hit = self._entries.get(key)
        return None if hit is None else hit[0]

    def __contains__(self, key: object) -> bool:
        """An entry is there, expired or not."""
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """The entries' size as ``size_of`` counts it."""
        return self._bytes

    # --- writes ----------------------------------------------------------------------

    def put(self, key: K, value: V, ttl: float | None = MISSING) -> None:
        """Remember ``value`` for ``ttl`` seconds (default: the memory's ``ttl``)."""
        expires = self._expiry(ttl)
        with self._lock:
            self._store(key, expires, value)

    def add(self, key: K, value: V, ttl: float | None = MISSING) -> bool:
        """Remember ``value`` unless a fresh entry is there; True if it was stored. Of
        several threads that find an entry expired, exactly one gets True."""
        expires = self._expiry(ttl)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] > monotonic():
                return False
            self._store(key, expires, value)
            return True

    def setdefault(self, key: K, value: V, ttl: float | None = MISSING) -> V:
        """The fresh value if there is one, else ``value``, stored."""
        expires = self._expiry(ttl)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] > monotonic():
                return hit[1]
            self._store(key, expires, value)
            return value

    def pop(self, key: K, default: Any = None) -> V | Any:
        """Forget one entry; its value (even expired), else ``default``."""
        with self._lock:
            hit = self._entries.pop(key, None)
            if hit is not None:
                self._bytes -= hit[2]
        return default if hit is None else hit[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _expiry(self, ttl: float | None) -> float:
        if ttl is MISSING:
            ttl = self.ttl
        return inf if ttl is None else monotonic() + ttl

    def _store(self, key: K, expires: float, value: V) -> None:
        # The caller holds the lock. A rewritten key moves to the newest end: what is
        # written often is pushed out last.
        entries = self._entries
        size = self.size_of(key, value)
        old = entries.pop(key, None)
        if old is not None:
            self._bytes -= old[2]
        if size > self.max_bytes:
            return  # larger than the whole memory: not kept (and its old value is gone)
        while entries and (len(entries) >= self.max_entries or self._bytes + size > self.max_bytes):
            self._bytes -= entries.popitem(last=False)[1][2]
        entries[key] = (expires, value, size)
        self._bytes += size


# --- the registry ----------------------------------------------------------------------

_registry_lock = threading.Lock()
_memories: weakref.WeakSet[ProcessMemory] = weakref.WeakSet()
_resets: dict[Callable[[], object], None] = {}  # an ordered set


def _register(memory: ProcessMemory) -> None:
    with _registry_lock:
        _memories.add(memory)


def register_reset(reset: R) -> R:
    """Have ``forget_all`` call ``reset`` (no arguments), e.g. an ``lru_cache``'d
    singleton's ``cache_clear``. Returns it, so it can decorate a function."""
    with _registry_lock:
        _resets[reset] = None
    return reset


def unregister_reset(reset: Callable[[], object]) -> None:
    with _registry_lock:
        _resets.pop(reset, None)


def resets() -> list[Callable[[], object]]:
    """Every registered reset, in the order registered."""
    with _registry_lock:
        return list(_resets)


def memories() -> list[ProcessMemory]:
    """Every memory of this process, by name."""
    with _registry_lock:
        found = list(_memories)
    return sorted(found, key=lambda memory: memory.name)


def forget_all() -> None:
    """Empty every memory and run every registered reset (tests: a clean process)."""
    with _registry_lock:
        found, resets = list(_memories), list(_resets)
    for memory in found:
        memory.clear()
    for reset in resets:
        reset()
