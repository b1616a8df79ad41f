"""The Redis commands of purchases answered on the server's event loop, sent together.

A purchase that the front runs on the event loop (config/front.py) waits on two Redis
round trips, and the loop waits with it: nothing else in the process moves meanwhile,
although the requests that came in with it are ready to send theirs. ``run_batched`` runs
a function in a greenlet; when it sends a command through a thread client
(``stock.redis_client.thread_client``) the greenlet pauses there, and once every request
of this loop turn has had its turn, one pipeline carries all their commands (one per
client, in one write on the thread client's own connection: ``execute_many``, so a batch
never waits for a connection to be opened). Each function then goes on with its own reply or
error, exactly where it stopped: the code that sends the commands is the code every
other path runs, unchanged; only the waiting is shared.

What a pipeline changes, and what it does not: each command is still the one atomic
command (a Lua script runs whole); a pipeline is not a transaction, and commands of
different requests never depended on their order. A command's error (NOSCRIPT, a script's
refusal) is its caller's alone; a connection error or a timeout is every caller's in that
pipeline, as it would have been each one's on its own connection, but waited for once.

A function keeps running until it returns even if the request that started it is gone:
a reservation made for a client that left stays the client's, as on a thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import greenlet

logger = logging.getLogger(__name__)


class _Batched(greenlet.greenlet):
    """A function whose commands wait for the loop turn's pipeline."""

    done: asyncio.Future
    expected: tuple[type[BaseException], ...]


class _Command(NamedTuple):
    client: Any  # a thread client (stock.redis_client): execute_command, execute_many
    args: tuple
    options: dict


class _Pending(NamedTuple):
    run: _Batched
    command: _Command


def command_batched(client, args: tuple, options: dict) -> tuple[bool, Any]:
    """(True, the reply) when the caller runs under ``run_batched``: the command went with
    the loop turn's pipeline (its error is raised here); (False, None) otherwise."""
    current = greenlet.getcurrent()
    if type(current) is not _Batched or current.parent is None:
        return False, None
    return True, current.parent.switch(_Command(client, args, options))


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

    def add(self, pending: _Pending) -> None:
        if not self.waiting:
            # Runs after the callbacks and tasks ready now: their commands join this one.
            self.loop.call_soon(self.send)
        self.waiting.append(pending)

    def send(self) -> None:
        waiting, self.waiting = self.waiting, []
        by_client: dict[int, list[_Pending]] = {}
        for pending in waiting:
            by_client.setdefault(id(pending.command.client), []).append(pending)
        for group in by_client.values():
            for pending, reply, failed in zip(group, *_replies(group), strict=True):
                self.resume(pending.run, reply, failed)

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


def _replies(group: list[_Pending]) -> tuple[list[Any], list[bool]]:
    """The replies to one client's commands, and whether each is an error to raise."""
    client = group[0].command.client
    try:
        replies = client.execute_many([(pending.command.args, pending.command.options) for pending in group])
    except Exception as exc:  # a connection error, a timeout: every command's
        return [exc] * len(group), [True] * len(group)
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
