"""stock.batching: the Redis commands of the functions run together on an event loop go in
one pipeline per loop turn, and their fetches (fetch_batched) in one call per batch; each
function gets its own reply, value or error where it sent its command, and finishes even
when the request that started it is gone."""

import asyncio
import gc
import logging
import os
import signal
import threading
import uuid

import pytest
import redis
from django.conf import settings

from stock.batching import fetch_batched, run_batched, send_unwaited
from stock.redis_client import cache_redis, thread_client
from stock.scripts import LuaScript

from .drills.infra import RedisServer
from .helpers import batch_sizes, free_port, wait_until

# The functions use the cache Redis's thread client: a single Redis in every set-up (the
# stock Redis may be a Cluster, whose client is not batched).

ECHO = LuaScript(None, b"return {KEYS[1], ARGV[1]}")  # type: ignore[arg-type]


@pytest.fixture
def batches(monkeypatch) -> list[int]:
    return batch_sizes(monkeypatch)


def _key(name: str) -> str:
    return f"test:batching:{uuid.uuid4().hex}:{name}"


def test_functions_on_one_loop_send_each_step_in_one_batch(batches):
    keys = [_key(str(i)) for i in range(20)]

    def steps(key: str) -> tuple[int, int, bytes]:
        client = cache_redis()
        first = client.incr(key)
        second = client.incrby(key, 10)
        return first, second, client.get(key)

    async def together():
        return await asyncio.gather(*(run_batched(steps, key) for key in keys))

    replies = asyncio.run(together())
    assert replies == [(1, 11, b"11")] * len(keys), "each function its own replies, in its own order"
    assert batches == [20, 20, 20], "one batch per step, all twenty functions in each"
    assert [cache_redis().get(key) for key in keys] == [b"11"] * len(keys)


def test_a_lone_function_sends_its_commands_as_they_are(batches):
    key = _key("lone")
    assert asyncio.run(run_batched(lambda: (cache_redis().set(key, "1"), cache_redis().get(key)))) == (True, b"1")
    assert batches == [1, 1]


def test_a_commands_error_is_its_callers_alone_and_a_lost_script_is_loaded_again():
    text, counter = _key("text"), _key("counter")
    cache_redis().set(text, "not a number")
    cache_redis().script_flush()  # a Redis that restarted: NOSCRIPT for every EVALSHA

    def incr(key: str):
        try:
            return cache_redis().incr(key)
        except redis.ResponseError as exc:
            return type(exc).__name__

    def echo(key: str):
        return ECHO(keys=[key], args=["x"], client=cache_redis())

    async def together():
        return await asyncio.gather(
            run_batched(incr, text), run_batched(incr, counter), run_batched(echo, "a"), run_batched(echo, "b")
        )

    assert asyncio.run(together()) == ["ResponseError", 1, [b"a", b"x"], [b"b", b"x"]]


async def _left_after_the_first_command(batched) -> None:
    """``batched`` (a run_batched call) cancelled once it and another function have sent
    their first command: its client left."""
    request = asyncio.ensure_future(batched)
    other = asyncio.ensure_future(run_batched(lambda: cache_redis().incr(_key("other"))))
    await asyncio.sleep(0)  # both have sent their first command
    request.cancel()
    assert await other == 1
    with pytest.raises(asyncio.CancelledError):
        await request


def test_a_function_finishes_when_its_request_is_gone():
    key = _key("left")

    def two_steps():
        cache_redis().set(key, "reserved")
        cache_redis().expire(key, 60)
        return "answered"

    asyncio.run(_left_after_the_first_command(run_batched(two_steps)))
    assert cache_redis().get(key) == b"reserved"
    assert 0 < cache_redis().ttl(key) <= 60, "its second command ran too"


class Refusal(Exception):
    """An error a batched function's caller expects, and handles when it is there."""


@pytest.mark.parametrize("raised, logged", [(ValueError, True), (Refusal, False)])
def test_an_error_raised_after_the_caller_left_is_logged_unless_expected(caplog, raised, logged):
    """A purchase whose client left runs to its end (the test above); an error it raised then
    was dropped with nobody told. It is logged now, except those its caller would have
    handled (the front's SynchronousOnlyOperation: nothing to do with nobody waiting)."""
    key = _key("orphan")

    def fails_after_a_command():
        cache_redis().incr(key)
        raise raised("after the first command")

    with caplog.at_level(logging.ERROR, logger="stock.batching"):
        asyncio.run(_left_after_the_first_command(run_batched(fails_after_a_command, expected=(Refusal,))))
    assert cache_redis().get(key) == b"1", "it ran to its end"
    errors = [r for r in caplog.records if r.name == "stock.batching"]
    if logged:
        assert len(errors) == 1 and errors[0].exc_info[0] is ValueError, caplog.text
    else:
        assert errors == [], caplog.text


def test_a_timeout_is_every_callers_of_the_batch_and_waited_for_once(tmp_path, batches):
    server = RedisServer(free_port(), tmp_path).start()
    pool = redis.Redis.from_url(server.url, socket_timeout=0.5)
    try:

        def incr(key: str):
            client = thread_client("test-batching", server.url, lambda: pool)
            try:
                return client.incr(key)
            except redis.TimeoutError:
                return "timeout"

        async def together(n: int):
            return await asyncio.gather(*(run_batched(incr, f"k{i}") for i in range(n)))

        assert asyncio.run(together(3)) == [1, 1, 1]
        os.kill(server.process.proc.pid, signal.SIGSTOP)
        try:
            del batches[:]
            assert asyncio.run(together(3)) == ["timeout"] * 3
            assert batches == [3], "one batch timed out for the three, none sent again"
        finally:
            os.kill(server.process.proc.pid, signal.SIGCONT)
        # The stopped server ran the batch when it woke: each command once, none sent again.
        wait_until(lambda: pool.get("k0") == b"2", timeout=30, what="the pipeline run after SIGCONT")
        assert [pool.get(f"k{i}") for i in range(3)] == [b"2"] * 3
        assert asyncio.run(together(3)) == [3, 3, 3], "the clients work again"
    finally:
        pool.close()
        server.stop()


class Refused(Exception):
    """The error a batched function raises after its command."""


def test_a_function_that_raises_after_a_command_leaves_no_garbage_cycle():
    """A function on the loop that stops with an error after its command (a token nobody
    has: AuthenticationFailed) leaves nothing for the cyclic collector. Its
    traceback held the frames that held the future holding it: a flood of new shoppers
    left thousands of frames for every full collection to find, each one a pause of
    every request on the loop."""
    key = _key("raises")

    def refused() -> None:
        cache_redis().incr(key)
        raise Refused

    async def flood() -> int:
        await asyncio.gather(*(run_batched(refused) for _ in range(5)), return_exceptions=True)  # warm
        gc.collect()
        gc.disable()
        try:
            outcomes = await asyncio.gather(*(run_batched(refused) for _ in range(100)), return_exceptions=True)
            assert all(isinstance(outcome, Refused) for outcome in outcomes)
            del outcomes
            return gc.collect()
        finally:
            gc.enable()

    found = asyncio.run(flood())
    assert found < 20, f"{found} objects in garbage cycles after 100 functions raised"
    assert cache_redis().get(key) == b"105"


def test_the_loops_batches_open_no_connection_when_a_thread_takes_the_pools_idle_one(monkeypatch):
    """A pool thread that starts takes a connection from the pool for its life. The loop's
    batches once went through redis-py pipelines, which take one from the pool and give it
    back: the thread took that one, and the loop's next batch opened a new connection,
    with every request of the process waiting (each pool thread's first request, in a
    sale's first seconds)."""
    url = settings.CACHES["default"]["LOCATION"]
    pool = redis.Redis.from_url(url)  # a pool of its own: what it holds is known
    opened: list[str] = []
    make_connection = pool.connection_pool.make_connection

    def counted():
        opened.append(threading.current_thread().name)
        return make_connection()

    monkeypatch.setattr(pool.connection_pool, "make_connection", counted)
    client = lambda: thread_client("test-batching-held", url, lambda: pool)  # noqa: E731
    key = _key("loop")

    async def together():
        return await asyncio.gather(*(run_batched(lambda: client().incr(key)) for _ in range(5)))

    started, done = threading.Event(), threading.Event()

    def pool_thread():
        client().ping()
        started.set()
        done.wait(30)  # alive, holding its connection, until the loop's next batch is sent

    try:
        assert sorted(asyncio.run(together())) == [1, 2, 3, 4, 5]
        starter = threading.Thread(target=pool_thread, name="pool-thread-that-starts")
        starter.start()
        assert started.wait(30)
        del opened[:]
        assert sorted(asyncio.run(together())) == [6, 7, 8, 9, 10]
        assert opened == [], "the loop's batch went on a connection it opened"
    finally:
        done.set()
        pool.close()


def test_a_new_connection_does_not_look_the_client_library_up_in_the_package_metadata(monkeypatch):
    """redis-py finds its version for CLIENT SETINFO in the installed packages' metadata,
    for every connection unless told: a scan of sys.path, tens of milliseconds on a busy
    web process, whose event loop opens connections too."""
    import redis.utils

    from stock.redis_client import stock_redis

    looked_up: list[str] = []
    version = redis.utils.metadata.version

    def counted(name: str) -> str:
        looked_up.append(name)
        return version(name)

    monkeypatch.setattr(redis.utils.metadata, "version", counted)
    for client in (stock_redis(), cache_redis()):
        connection = client.connection_pool.make_connection()
        try:
            connection.connect()
        finally:
            connection.disconnect()
    assert looked_up == []


def test_functions_waiting_on_one_fetch_share_its_calls_one_at_a_time(batches):
    """The items of the functions that reach a fetch in one loop turn go in one call of
    it; those that come while it runs wait and go together in the next. Each function gets
    its own value (None: the fetch had none for its item), two asking for the same item
    share it, and each goes on to its next command."""
    calls: list[list[int]] = []
    key = _key("fetched")

    async def main():
        second_wave_waiting = asyncio.Event()

        async def fetch(items: list[int]) -> dict[int, int]:
            calls.append(sorted(items))
            if len(calls) == 1:
                await second_wave_waiting.wait()
            return {item: item * 10 for item in items if item != 3}

        def buy(item: int):
            waited, value = fetch_batched(fetch, item)
            assert waited
            return value, cache_redis().incr(key) > 0

        first = [asyncio.ensure_future(run_batched(buy, item)) for item in (1, 2, 3, 3)]
        while not calls:  # the first wave's call is running
            await asyncio.sleep(0)
        second = [asyncio.ensure_future(run_batched(buy, item)) for item in (4, 5)]
        while sum(len(each) for each in _fetches_waiting(fetch)) < 2:
            await asyncio.sleep(0)
        second_wave_waiting.set()
        return await asyncio.gather(*first, *second)

    answers = asyncio.run(main())
    assert answers == [(10, True), (20, True), (None, True), (None, True), (40, True), (50, True)]
    assert calls == [[1, 2, 3], [4, 5]], "one call per wave, an item asked for twice fetched once"
    assert cache_redis().get(key) == b"6"


def _fetches_waiting(fetch) -> list[list]:
    """The functions waiting for ``fetch``'s next call on the running loop."""
    from stock.batching import _turn

    waiting = _turn().fetches.get(fetch)
    return list(waiting.waiting.values()) if waiting is not None else []


def test_a_fetchs_error_is_every_waiters_and_the_next_call_goes_on():
    calls = 0

    async def fetch(items: list[str]) -> dict[str, str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Refused("the source is away")
        return {item: item.upper() for item in items}

    def look_up(item: str):
        try:
            return fetch_batched(fetch, item)[1]
        except Refused as exc:
            return str(exc)

    async def twice():
        first = await asyncio.gather(*(run_batched(look_up, item) for item in "ab"))
        return first, await asyncio.gather(*(run_batched(look_up, item) for item in "ab"))

    assert asyncio.run(twice()) == (["the source is away"] * 2, ["A", "B"])


def test_outside_a_batched_function_a_fetch_is_not_waited_for():
    async def fetch(items):  # pragma: no cover - never called
        raise AssertionError

    assert fetch_batched(fetch, "x") == (False, None)


def test_unwaited_commands_go_with_the_turns_pipeline_and_their_errors_are_logged(batches, caplog):
    written, text = _key("unwaited"), _key("text")
    cache_redis().set(text, "not a number")

    async def write_then_read():
        send_unwaited(cache_redis(), [("SET", written, "1"), ("INCR", text)])
        return await run_batched(lambda: cache_redis().get(written))

    with caplog.at_level(logging.WARNING, logger="stock.batching"):
        assert asyncio.run(write_then_read()) == b"1"
    assert batches == [3], "the two writes went with the function's command"
    assert [r.getMessage() for r in caplog.records if r.name == "stock.batching"] == [
        "a command nobody waited for failed: ResponseError: value is not an integer or out of range"
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "a" * 40, 4, "auth:token:x", "auth:refused:x", "auth:filter", "-", "", "1", 10, 60, -1, 1.5),
        ("SET", "key:é", b"\x00\xffbytes", "EX", 21600),
    ],
)
def test_a_batch_is_packed_as_redis_py_packs_it(args):
    from stock.redis_client import _packed

    connection = cache_redis().connection
    assert _packed(connection, args) == b"".join(connection.pack_command(*args))


def test_what_only_redis_py_takes_or_refuses_goes_through_redis_py(batches):
    """A command name of two words (redis-py splits it), a bytearray (redis-py takes it);
    a bool is refused with redis-py's DataError, before anything is sent."""
    key = _key("bytearray")

    def commands():
        client = cache_redis()
        client.set(key, bytearray(b"ok"))
        with pytest.raises(redis.DataError):
            client.set(key, True)
        return client.config_get("maxmemory"), client.get(key)

    config, value = asyncio.run(run_batched(commands))
    assert "maxmemory" in config and value == b"ok"
