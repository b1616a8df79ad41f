"""core.memory: the one process-memory cache (expiry, bound, threads) and forget_all."""

import threading
import time

import pytest

import core.memory
from core.memory import MISSING, ProcessMemory
from seckill import traffic
from seckill.purchase import authentication, shoppers
from seckill.purchase.fallback import fallback_slots_reset
from seckill.sale import pages, snapshot, soldout
from stock.breaker import redis_breaker, redis_breaker_reset
from stock.redis_client import reset_stock_redis, stock_redis

from .helpers import wait_until

THREADS = 8
ROUNDS = 10_000


def test_an_entry_lasts_its_ttl_then_is_only_stale():
    memory = ProcessMemory("test.ttl", max_entries=10, ttl=3600)
    memory.put("default", 1)
    memory.put("forever", 2, ttl=None)
    memory.put("short", 3, ttl=0.01)
    assert memory.get("default") == 1
    assert memory.get("forever") == 2
    assert memory.expires_at("forever") == float("inf")

    wait_until(lambda: memory.get("short", MISSING) is MISSING, timeout=10, what="the short entry to expire")
    assert memory.expires_at("short") <= time.monotonic()
    assert memory.stale("short") == 3  # an expired copy is still there for a stale read
    assert "short" in memory
    assert memory.get("short", "none") == "none"
    assert memory.get("default") == 1  # the others last

    assert memory.pop("short") == 3
    assert "short" not in memory
    assert memory.stale("short", MISSING) is MISSING
    assert memory.expires_at("short") is None


def test_none_is_a_value_of_its_own():
    memory = ProcessMemory("test.none", max_entries=10, ttl=3600)
    memory.put("absent activity", None)
    assert memory.get("absent activity", MISSING) is None
    assert memory.get("never put", MISSING) is MISSING


def test_add_and_setdefault_store_only_over_a_missing_or_expired_entry():
    memory = ProcessMemory("test.add", max_entries=10)
    assert memory.add("k", "first", ttl=3600)
    assert not memory.add("k", "second", ttl=3600)
    assert memory.get("k") == "first"
    assert memory.setdefault("k", "third") == "first"
    assert memory.setdefault("other", "fourth") == "fourth"

    memory.put("k", "old", ttl=0.01)
    wait_until(lambda: memory.get("k") is None, timeout=10, what="the entry to expire")
    assert memory.add("k", "renewed", ttl=3600)
    assert memory.get("k") == "renewed"


def test_a_full_memory_drops_its_oldest_entries_not_all_of_them():
    memory = ProcessMemory("test.bound", max_entries=3)
    for key in range(5):
        memory.put(key, key)
    assert len(memory) == 3
    assert [memory.get(key) for key in range(5)] == [None, None, 2, 3, 4]

    memory.put(2, "rewritten")  # a rewrite is the newest entry again
    memory.put(5, 5)
    assert 3 not in memory
    assert memory.get(2) == "rewritten"
    assert len(memory) == 3

    for key in range(1000):
        memory.add(("added", key), key)
        memory.setdefault(("set", key), key)
    assert len(memory) == 3


def test_threads_writing_and_reading_at_once_keep_the_bound():
    memory = ProcessMemory("test.threads", max_entries=500, ttl=3600)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(worker: int) -> None:
        try:
            start.wait()
            for i in range(ROUNDS):
                memory.put((worker, i), i)
                memory.put(("shared", i % 50), worker)
                memory.get((worker, i - 1))
                memory.get(("shared", i % 50))
                memory.stale((worker, i - 100))
                if i % 7 == 0:
                    memory.pop((worker, i - 3))
                if i % 11 == 0:
                    memory.add(("claim", i % 13), worker)
                assert len(memory) <= 500
        except BaseException as exc:  # reported by the test's own thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(memory) <= 500
    assert memory.bytes == sum(memory.size_of(k, memory.stale(k)) for k in list(memory._entries))
    # What is left is what was written: a worker's own key holds its round, a shared one a worker.
    assert all(memory.stale((n, i), i) == i for n in range(THREADS) for i in range(ROUNDS))
    assert {memory.stale(("shared", k)) for k in range(50)} <= {*range(THREADS), None}
    memory.put("after", 1)
    assert memory.get("after") == 1
    assert len(memory) <= 500


def test_of_many_threads_finding_one_expired_entry_exactly_one_renews_it():
    memory = ProcessMemory("test.claim", max_entries=10)

    def claim(start: threading.Barrier, won: list[bool]) -> None:
        start.wait()
        won.append(memory.add("sold out", True, ttl=3600))

    for _ in range(20):
        memory.put("sold out", True, ttl=0)
        start = threading.Barrier(THREADS)
        won: list[bool] = []
        threads = [threading.Thread(target=claim, args=(start, won)) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(won) == [False] * (THREADS - 1) + [True]


def test_when_the_sold_out_memory_runs_out_every_request_asks_redis_until_it_answers(settings):
    settings.SECKILL_SOLD_OUT_TTL = 0.01
    soldout.sold_out_remember(7)
    ran_out = time.monotonic() + 0.01
    wait_until(lambda: time.monotonic() > ran_out, timeout=10, what="the memory to run out")
    settings.SECKILL_SOLD_OUT_TTL = 3600
    start = threading.Barrier(THREADS)
    known: list[bool] = []

    def ask() -> None:
        start.wait()
        known.append(soldout.sold_out_known(7))

    threads = [threading.Thread(target=ask) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert known == [False] * THREADS  # an expired memory answers no one
    assert not soldout.sold_out_known(7)

    soldout.sold_out_note(7, remaining=0)  # Redis said "none left" again: remembered
    assert soldout.sold_out_known(7)
    soldout.sold_out_note(7, remaining=3)  # stock came back: forgotten at once
    assert not soldout.sold_out_known(7)


def test_forget_all_empties_every_memory_and_runs_every_reset():
    mine = [ProcessMemory("test.forget.a", max_entries=10), ProcessMemory("test.forget.b", max_entries=10, ttl=60)]
    calls: list[str] = []

    def reset() -> None:
        calls.append("reset")

    core.memory.register_reset(reset)
    try:
        for memory in mine:
            memory.put("k", "v")
        core.memory.forget_all()
        assert [len(memory) for memory in mine] == [0, 0]
        assert calls == ["reset"]
    finally:
        core.memory.unregister_reset(reset)
    core.memory.forget_all()
    assert calls == ["reset"]


def test_forget_all_reaches_every_cache_and_singleton_of_the_project():
    assert authentication and traffic and pages and snapshot and shoppers  # imported: their memories exist
    names = {memory.name for memory in core.memory.memories()}
    assert {
        "seckill.purchase.authentication",
        "seckill.traffic",
        "seckill.sale.pages.rendered",
        "seckill.sale.snapshot.flights",
        "seckill.sale.snapshot.local",
        "seckill.purchase.shoppers.flights",
        "seckill.purchase.shoppers.local",
        "seckill.sale.soldout",
    } <= names
    assert {reset_stock_redis, redis_breaker_reset, fallback_slots_reset} <= set(core.memory.resets())

    for memory in core.memory.memories():
        memory.put(("test", "key"), "value", ttl=3600)
    client, breaker = stock_redis(), redis_breaker()
    core.memory.forget_all()
    assert [memory.name for memory in core.memory.memories() if len(memory)] == []
    assert stock_redis() is not client
    assert redis_breaker() is not breaker


def test_max_entries_must_allow_one_entry():
    with pytest.raises(ValueError, match="at least 1"):
        ProcessMemory("test.empty", max_entries=0)


def test_a_memory_keeps_within_its_bytes_dropping_the_oldest():
    memory = ProcessMemory("test.bytes", max_entries=1000, max_bytes=10_000, size_of=lambda key, value: len(value))
    for i in range(100):
        memory.put(i, b"x" * 500)
        assert memory.bytes <= 10_000
    assert len(memory) == 20
    assert sorted(memory._entries) == list(range(80, 100))  # the newest
    memory.put(99, b"y" * 100)  # a rewrite counts its new size, not both
    assert memory.bytes == 19 * 500 + 100
    memory.put("huge", b"z" * 20_000)  # larger than the whole memory: not kept, nothing else lost
    assert "huge" not in memory
    memory.pop(98)
    assert memory.bytes == 18 * 500 + 100
    memory.clear()
    assert memory.bytes == 0


def test_every_memory_of_the_project_stays_within_its_entries_and_bytes_under_a_flood_of_new_keys():
    """30,000 distinct shoppers' worth of keys and more, into every memory: none grows past
    its bounds (the token memory's key is a 40-character token, as a real one)."""
    assert authentication and traffic and pages and snapshot and shoppers  # imported: their memories exist
    for memory in core.memory.memories():
        for i in range(memory.max_entries + 1000):
            memory.put((f"{i:040d}", i), ("value", i), ttl=3600)
        assert len(memory) <= memory.max_entries, memory
        assert memory.bytes <= memory.max_bytes, memory
    core.memory.forget_all()
