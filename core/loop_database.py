"""The event loop's own database connection, for the one statement the server's front runs
without a thread: the batched token lookup of a purchase (seckill.authentication).

One psycopg ``AsyncConnection`` per process and event loop, made from Django's settings
of the ``default`` database when first needed (the same parameters Django connects with,
the role it assumes included), in autocommit, its statements prepared once and run by
libpq's own calls with psycopg's adapters (``_Held.fetch_all``): psycopg's cursor, its
connection lock and its waiting generators cost a new shopper more CPU than the statement
(docs/DESIGN-NOTES.md). Django's
own connections are per thread and synchronous: on the loop's thread Django refuses them
(``SynchronousOnlyOperation``), and a hop to a thread for every lookup cost a flood of new
shoppers as much CPU as their purchases, and the loop the GIL while the thread ran.

A statement waits at most ``QUERY_TIMEOUT`` and a connection ``CONNECT_TIMEOUT``; the
database away is Django's ``OperationalError`` (the API answers 503 ``busy``, as for any
query), and for ``RETRY_AFTER`` after a connection could not be made, the next calls fail
at once rather than each wait for the same timeout. A connection that fails is dropped
(a statement cut off by a timeout may still be running on it); a read on a connection
that had served before is tried once more on a new one, so a database that restarted
fails no lookup. Only reads go through here: a read sent twice is still one read.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from typing import Any

import psycopg
from django.db import OperationalError, connections
from psycopg import errors as psycopg_errors
from psycopg import pq
from psycopg import sql as psycopg_sql
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq.abc import PGresult

from .memory import register_reset

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 2.0
QUERY_TIMEOUT = 2.0
RETRY_AFTER = 1.0


_PLACEHOLDER = re.compile(r"%(.)", re.DOTALL)


def _numbered(sql: str) -> bytes:
    """``sql`` with its ``%s`` placeholders written as PostgreSQL's own ``$1``, ``$2``…"""
    count = 0

    def one(match: re.Match) -> str:
        nonlocal count
        if match.group(1) == "%":
            return "%"
        if match.group(1) != "s":
            raise ValueError(f"only %s placeholders are supported: {sql!r}")
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(one, sql).encode()


class _Held:
    __slots__ = ("connection", "database", "lock", "served", "statements", "transformer")

    def __init__(self, connection: psycopg.AsyncConnection, database: object):
        self.connection = connection
        self.database = database  # the database name it was made for: the tests' is named late
        self.served = False  # it has answered: a failure may be a server that went away since
        self.statements: dict[tuple[str, tuple[int, ...]], bytes] = {}  # (sql, types) -> its prepared name
        self.transformer = Transformer(connection)
        self.lock = asyncio.Lock()  # one statement at a time: their messages share the socket

    def serves(self, database: object) -> bool:
        """Open, and made for ``database``."""
        return not self.connection.closed and self.database == database

    async def fetch_all(self, sql: str, params: list[Any]) -> list[tuple]:
        """The rows of ``sql`` with ``params``, prepared on this connection at its first
        run. Raises psycopg's errors."""
        async with self.lock:
            return await self._fetch_all(sql, params)

    async def _fetch_all(self, sql: str, params: list[Any]) -> list[tuple]:
        pgconn, transformer = self.connection.pgconn, self.transformer
        values = transformer.dump_sequence(params, [PyFormat.AUTO] * len(params))
        key = (sql, tuple(transformer.types or ()))
        name = self.statements.get(key)
        if name is None:
            name = f"loop_{len(self.statements)}".encode()
            pgconn.send_prepare(name, _numbered(sql), param_types=transformer.types)
            await self._result(pq.ExecStatus.COMMAND_OK)
            self.statements[key] = name
        pgconn.send_query_prepared(name, values, param_formats=transformer.formats)
        result = await self._result(pq.ExecStatus.TUPLES_OK)
        transformer.set_pgresult(result)
        return transformer.load_rows(0, result.ntuples, tuple)

    async def _result(self, expected: pq.ExecStatus) -> PGresult:
        """The result of the command just sent, once it is all in (every result read, so
        the connection is ready for the next); its error raised."""
        pgconn = self.connection.pgconn
        while pgconn.flush():  # non-blocking: the rest waits for room in the socket
            await _ready(pgconn.socket, write=True)
        first: PGresult | None = None
        while True:
            pgconn.consume_input()
            while not pgconn.is_busy():
                result = pgconn.get_result()
                if result is None:
                    if first is None:
                        raise psycopg.InterfaceError("the server sent no result")
                    if first.status != expected:
                        raise psycopg_errors.error_from_result(first, encoding=self.connection.info.encoding)
                    return first
                if first is None:  # an error comes first; nothing follows a query's rows
                    first = result
            await _ready(pgconn.socket)


async def _ready(fd: int, *, write: bool = False) -> None:
    """Until the socket can be read (or written) without blocking."""
    loop = asyncio.get_running_loop()
    watch, unwatch = (loop.add_writer, loop.remove_writer) if write else (loop.add_reader, loop.remove_reader)
    future = loop.create_future()
    watch(fd, _set_done, future)
    try:
        await future
    finally:
        unwatch(fd)


def _set_done(future: asyncio.Future) -> None:
    if not future.done():  # called again if the loop turns before the waiter resumes
        future.set_result(None)


class LoopDatabase:
    """The loops' connections to one of Django's databases (by alias)."""

    def __init__(self, alias: str = "default"):
        self.alias = alias
        self.held: dict[asyncio.AbstractEventLoop, _Held] = {}
        self.connecting: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self.pid = os.getpid()
        self.retry_at = 0.0

    async def fetch_all(self, sql: str, params: list[Any]) -> list[tuple]:
        """The rows of ``sql`` (a fixed text, prepared once per connection) with ``params``,
        on this loop's connection. Raises OperationalError when the database is away."""
        for attempt in (1, 2):
            held = await self._held()
            try:
                async with asyncio.timeout(QUERY_TIMEOUT):
                    rows = await held.fetch_all(sql, params)
            except (psycopg.OperationalError, psycopg.InterfaceError, TimeoutError) as exc:
                await self._drop(held.connection)
                # Once more on a new connection only when this one had served: the server
                # closed it since (a restart). A timeout is not tried again.
                if attempt == 2 or not held.served or isinstance(exc, TimeoutError):
                    raise OperationalError(f"the loop's database connection failed: {exc!r}") from None
            else:
                held.served = True
                return rows
        raise AssertionError("not reached")

    async def _held(self) -> _Held:
        if os.getpid() != self.pid:  # a forked child: the parent's sockets are not its own
            self.held, self.connecting, self.pid = {}, {}, os.getpid()
        loop = asyncio.get_running_loop()
        database = connections[self.alias].settings_dict["NAME"]
        held = self.held.get(loop)
        if held is not None and held.serves(database):
            return held
        # One connection per loop: whoever waited here takes the one just made.
        async with self.connecting.setdefault(loop, asyncio.Lock()):
            return await self._connected(loop, database)

    async def _connected(self, loop: asyncio.AbstractEventLoop, database: object) -> _Held:
        held = self.held.get(loop)
        if held is not None and held.serves(database):
            return held
        if held is not None:
            await self._drop(held.connection)
        self._closed_loops_forgotten()
        if time.monotonic() < self.retry_at:
            raise OperationalError("the loop's database connection failed moments ago")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                connection = await self._connect()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            self.retry_at = time.monotonic() + RETRY_AFTER
            raise OperationalError(f"the loop's database connection could not be made: {exc!r}") from None
        self.held[loop] = held = _Held(connection, database)
        return held

    async def _connect(self) -> psycopg.AsyncConnection:
        wrapper = connections[self.alias]
        params = wrapper.get_connection_params()
        params.pop("cursor_factory", None)  # Django's synchronous cursor
        connection = await psycopg.AsyncConnection.connect(**params, autocommit=True)
        role = wrapper.settings_dict["OPTIONS"].get("assume_role")
        if role:  # as Django's own connections (DatabaseWrapper._configure_role)
            await connection.execute(psycopg_sql.SQL("SET ROLE {}").format(psycopg_sql.Literal(role)))
        return connection

    async def _drop(self, connection: psycopg.AsyncConnection) -> None:
        for loop, held in list(self.held.items()):
            if held.connection is connection:
                del self.held[loop]
        try:
            await connection.close()
        except Exception as exc:  # closing a broken connection: nothing left to do
            logger.debug("loop database connection not closed cleanly: %s", exc)

    def _closed_loops_forgotten(self) -> None:
        for loop in [loop for loop in self.held if loop.is_closed()]:
            self.held.pop(loop).connection.pgconn.finish()  # its loop is gone: closed without it
        for loop in [loop for loop in self.connecting if loop.is_closed()]:
            del self.connecting[loop]

    def close_all(self) -> None:
        """Close every connection (their loops may be gone: libpq's own close)."""
        held, self.held, self.connecting = self.held, {}, {}
        if os.getpid() == self.pid:
            for each in held.values():
                each.connection.pgconn.finish()
        self.retry_at = 0.0


loop_database = LoopDatabase()


@register_reset
def loop_database_reset() -> None:
    """Tests point the settings at another database: every connection is made again."""
    loop_database.close_all()
