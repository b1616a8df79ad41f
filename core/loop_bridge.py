"""Synchronous code run on the event loop, its waits awaited: the pattern SQLAlchemy's
asyncio layer uses (``greenlet_spawn`` / ``await_only``), with greenlet's public API.

``run_on_loop(fn, *args)`` runs ``fn`` in a greenlet of the loop's thread. Where ``fn``
would wait — a Redis command of ``stock.redis_client``'s clients, the token look-up of
``core.loop_database`` — the code below calls ``await_only(awaitable)``: the greenlet
pauses there, the loop awaits the awaitable (serving every other request meanwhile), and
the greenlet goes on with its result or its error, exactly where it stopped. So the
purchase's one code path (seckill) runs unchanged on the loop or on a thread, and on the
loop it costs no hop to a thread and back (docs/DESIGN-NOTES.md, "A purchase runs on the
event loop when it only waits on Redis").

Anything else that would block — Django's database connections, which refuse the loop's
thread (``SynchronousOnlyOperation``), a sleep — must not run there: the caller decides
beforehand (``seckill.purchase.gates.purchase_runs_inline``) and runs the rest on the pool.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import greenlet

T = TypeVar("T")


class _OnLoop(greenlet.greenlet):
    """A function running on the event loop, its waits awaited by ``run_on_loop``."""


def on_loop() -> bool:
    """Whether the caller runs under ``run_on_loop`` (its waits must be awaited)."""
    return type(greenlet.getcurrent()) is _OnLoop


def await_only(awaitable: Awaitable[T]) -> T:
    """The result of ``awaitable``, awaited by the loop while this greenlet pauses."""
    current = greenlet.getcurrent()
    if type(current) is not _OnLoop or current.parent is None:
        raise RuntimeError("await_only() outside run_on_loop()")
    return current.parent.switch(awaitable)


async def run_on_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on this loop, in a greenlet of its own (with a copy of the caller's
    context: the request id of its log lines)."""
    runner = _OnLoop(fn, greenlet.getcurrent())
    runner.gr_context = contextvars.copy_context()
    step: Any = runner.switch(*args)
    while not runner.dead:
        try:
            value = await step
        except BaseException:
            step = runner.throw(*sys.exc_info())
        else:
            step = runner.switch(value)
    return step
