"""The Redis commands of purchases answered on the server's event loop, sent together.

A purchase that the front runs on the event loop (config/front.py) waits on two Redis
round trips, and the loop waits with it: nothing else in the process moves meanwhile,
although the requests that came in with it are ready to send theirs. ``run_batched`` runs
a function in a greenlet; when it sends a command through a thread client
(``stock.redis_client.thread_client``) the greenlet pauses there, and once every request
of this loop turn has had its turn, one pipeline carries all their commands (one per
client, in one write on the thread client's own connection: ``send_many``, so a batch
never waits for a connection to be opened; every client's batch is written before any
reply is read, so the round trips to the stock and the cache Redis overlap). Each
function then goes on with its own reply or error, exactly where it stopped: the code
that sends the commands is the code every other path runs, unchanged; only the waiting
is shared.

What a pipeline changes, and what it does not: each command is still the one atomic
command (a Lua script runs whole); a pipeline is not a transaction, and commands of
different requests never depended on their order. A command's error (NOSCRIPT, a script's
refusal) is its caller's alone; a connection error or a timeout is every caller's in that
pipeline, as it would have been each one's on its own connection, but waited for once.

A function may also wait for a value an async function fetches for many at once
(``fetch_batched``: the purchase's token lookup, one statement for the new shoppers of
the moment on the loop's own database connection): it pauses there as at a command, and
the items of every function waiting on the same fetch go in one call of it, one call at a
time per loop; the items that come while one runs go in the next.

A function keeps running until it returns even if the request that started it is gone:
a reservation made for a client that left stays the client's, as on a thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import greenlet

logger = logging.getLogger(__name__)

# Items of one fetch call at most (fetch_batched).
MAX_FETCH_ITEMS = 200


class _Batched(greenlet.greenlet):
    """A function whose commands wait for the loop turn's pipeline."""

    done: asyncio.Future
    expected: tuple[type[BaseException], ...]


class _Command(NamedTuple):
    client: Any  # a thread client (stock.redis_client): execute_command, send_many, read_many
    args: tuple
    options: dict


Fetch = Callable[[list[Any]], Awaitable[Mapping[Any, Any]]]


class _Fetch(NamedTuple):
    fetch: Fetch  # items -> {item: value}; an item it leaves out is None
    item: Hashable


class _Pending(NamedTuple):
    run: _Batched | None  # None: a command nobody waits for (send_unwaited)
    step: _Command | _Fetch


def command_batched(client, args: tuple, options: dict) -> tuple[bool, Any]:
    """(True, the reply) when the caller runs under ``run_batched``: the command went with
    the loop turn's pipeline (its error is raised here); (False, None) otherwise."""
    current = greenlet.getcurrent()
    if type(current) is not _Batched or current.parent is None:
        return False, None
    return True, current.parent.switch(_Command(client, args, options))


def fetch_batched(fetch: Fetch, item: Hashable) -> tuple[bool, Any]:
    """(True, ``item``'s value) when the caller runs under ``run_batched``: fetched by one
    call of ``fetch`` on the loop with the items of every function waiting on it (None when
    it returned none; its error is raised here); (False, None) otherwise."""
    current = greenlet.getcurrent()
    if type(current) is not _Batched or current.parent is None:
        return False, None
    return True, current.parent.switch(_Fetch(fetch, item))


def send_unwaited(client, commands: Sequence[tuple]) -> None:
    """``commands`` (each the args of one) sent on ``client`` with this loop turn's
    pipeline, their replies read and dropped (an error is logged): writes nobody waits for.
    On the event loop's thread, with a thread client of that thread."""
    turn = _turn()
    for args in commands:
        turn.add(_Pending(None, _Command(client, args, {})))


async def run_batched(function: Callable[..., Any], *args: Any, expected: tuple[type[BaseException], ...] = ()) -> Any:
    """``function(*args)``, with each command it sends through a thread client waiting for
    the pipeline of the requests of this loop turn. Returns or raises what it does. An
    error it raises once its caller has left is logged, unless it is ``expected`` (one
    the caller would have handled: nobody is left to act on it)."""
    run = _Batched(function)
    run.expected = expected
    run.gr_context = contextvars.copy_context()
    step = run.switch(*args)  # up to its first command, on this task's turn
    if run.dead:
        return step
    done = run.done = asyncio.get_running_loop().create_future()
    _turn().add(_Pending(run, step))
    del run, step
    try:
        return await done
    finally:
        del done  # an error raised here has this frame in its traceback (as in _Turn.resume)


class _Turn:
    """This loop's commands waiting to be sent, and the callback that sends them."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.waiting: list[_Pending] = []
        self.fetches: dict[Fetch, _Fetches] = {}

    def add(self, pending: _Pending) -> None:
        if not self.waiting:
            # Runs after the callbacks and tasks ready now: their commands join this one.
            self.loop.call_soon(self.send)
        self.waiting.append(pending)

    def send(self) -> None:
        waiting, self.waiting = self.waiting, []
        by_client: dict[int, list[_Pending]] = {}
        fetched: set[Fetch] = set()
        for pending in waiting:
            step = pending.step
            if isinstance(step, _Fetch):
                assert pending.run is not None  # a fetch always has its function waiting
                self.fetch_queued(step, pending.run)
                fetched.add(step.fetch)
            else:
                by_client.setdefault(id(step.client), []).append(pending)
        for fetch in fetched:  # once every item of this turn is queued: they go together
            fetches = self.fetches[fetch]
            if fetches.running is None:
                self.fetch_started(fetch, fetches)
        groups = list(by_client.values())
        # Every client's batch on its way before any reply is awaited: the round trips to
        # the stock and the cache Redis overlap.
        sent = [_sent(group) for group in groups]
        for group, error in zip(groups, sent, strict=True):
            for pending, reply, failed in zip(group, *_replies(group, error), strict=True):
                if pending.run is not None:
                    self.resume(pending.run, reply, failed)
                elif failed:
                    logger.warning("a command nobody waited for failed: %s: %s", type(reply).__name__, reply)

    def fetch_queued(self, step: _Fetch, run: _Batched) -> None:
        fetches = self.fetches.get(step.fetch)
        if fetches is None:
            fetches = self.fetches[step.fetch] = _Fetches()
        fetches.waiting.setdefault(step.item, []).append(run)

    def fetch_started(self, fetch: Fetch, fetches: _Fetches) -> None:
        """One call of ``fetch`` with up to MAX_FETCH_ITEMS of the items waiting for it."""
        batch = {item: fetches.waiting.pop(item) for item in list(itertools.islice(fetches.waiting, MAX_FETCH_ITEMS))}
        fetches.running = self.loop.create_task(self.fetched(fetch, fetches, batch))

    async def fetched(self, fetch: Fetch, fetches: _Fetches, batch: dict[Hashable, list[_Batched]]) -> None:
        failed: Exception | None = None
        try:
            values = await fetch(list(batch))
        except Exception as exc:  # every waiter's, as a pipeline's connection error
            failed, values = exc, {}
        fetches.running = None
        for item, runs in batch.items():
            for run in runs:
                self.resume(run, failed if failed is not None else values.get(item), failed is not None)
        del failed  # see resume: no frame of ours in a cycle with the error
        if fetches.waiting:
            self.fetch_started(fetch, fetches)

    def resume(self, run: _Batched, reply: Any, failed: bool) -> None:
        """The function on with its reply, to its next command (queued for the next
        pipeline) or its end (its request's answer)."""
        try:
            step = run.throw(reply) if failed else run.switch(reply)
        except BaseException as exc:  # the function's own error: its request's to answer
            # Its traceback from the function down: with this frame in it, which holds
            # the future that holds the error, each would keep the other alive for the
            # cyclic collector to find (DatabaseNeeded, once per new shopper of a flood).
            exc = exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None)
            if not run.done.done():
                run.done.set_exception(exc)
            elif not isinstance(exc, run.expected):
                logger.error("a batched call failed after its caller left", exc_info=exc)
            return
        if run.dead:
            if not run.done.done():
                run.done.set_result(step)
            return
        self.add(_Pending(run, step))


class _Fetches:
    """The items waiting for one fetch function on one loop, by item (a function each, or
    more asking for the same item), and its call running, if any."""

    __slots__ = ("running", "waiting")

    def __init__(self) -> None:
        self.waiting: dict[Hashable, list[_Batched]] = {}
        self.running: asyncio.Task | None = None


def _commands(group: list[_Pending]) -> list[_Command]:
    return [pending.step for pending in group]  # type: ignore[misc]  # grouped by client: commands only


def _sent(group: list[_Pending]) -> Exception | None:
    """One client's commands written in one go (``send_many``); the error that stopped them."""
    commands = _commands(group)
    try:
        commands[0].client.send_many([(command.args, command.options) for command in commands])
    except Exception as exc:  # a connection error, a timeout: every command's
        return exc
    return None


def _replies(group: list[_Pending], error: Exception | None) -> tuple[list[Any], list[bool]]:
    """The replies to one client's commands sent by ``_sent``, and whether each is an
    error to raise."""
    commands = _commands(group)
    if error is None:
        try:
            replies = commands[0].client.read_many([(command.args, command.options) for command in commands])
        except Exception as exc:  # a connection error, a timeout: every command's
            error = exc
    if error is not None:
        return [error] * len(group), [True] * len(group)
    return replies, [isinstance(reply, Exception) for reply in replies]


_turns: dict[asyncio.AbstractEventLoop, _Turn] = {}


def _turn() -> _Turn:
    loop = asyncio.get_running_loop()
    turn = _turns.get(loop)
    if turn is None:
        for old in [old for old in _turns if old.is_closed()]:
            del _turns[old]
        turn = _turns[loop] = _Turn(loop)
    return turn
