"""The event loop's own database connection, for the one statement the server's front runs
without a thread: the batched token lookup of a purchase (seckill.authentication).

One psycopg ``AsyncConnection`` per process and event loop, made from Django's settings
of the ``default`` database when first needed (the same parameters Django connects with,
the role it assumes included), in autocommit, its statements prepared once. Django's
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
import time
from typing import Any

import psycopg
from django.db import OperationalError, connections
from psycopg import sql as psycopg_sql

from .memory import register_reset

logger = logging.getLogger(__name__)

# A number of executions no statement reaches: only those sent with prepare=True are prepared.
_NEVER_BY_COUNT = 1 << 30
CONNECT_TIMEOUT = 2.0
QUERY_TIMEOUT = 2.0
RETRY_AFTER = 1.0


class _Held:
    __slots__ = ("connection", "database", "served")

    def __init__(self, connection: psycopg.AsyncConnection, database: object):
        self.connection = connection
        self.database = database  # the database name it was made for: the tests' is named late
        self.served = False  # it has answered: a failure may be a server that went away since


class LoopDatabase:
    """The loops' connections to one of Django's databases (by alias)."""

    def __init__(self, alias: str = "default"):
        self.alias = alias
        self.held: dict[asyncio.AbstractEventLoop, _Held] = {}
        self.pid = os.getpid()
        self.retry_at = 0.0

    async def fetch_all(self, sql: str, params: list[Any]) -> list[tuple]:
        """The rows of ``sql`` (a fixed text, prepared once per connection) with ``params``,
        on this loop's connection. Raises OperationalError when the database is away."""
        for attempt in (1, 2):
            held = await self._held()
            try:
                async with asyncio.timeout(QUERY_TIMEOUT):
                    cursor = await held.connection.execute(sql, params, prepare=True)
                    rows = await cursor.fetchall()
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
            self.held, self.pid = {}, os.getpid()
        loop = asyncio.get_running_loop()
        database = connections[self.alias].settings_dict["NAME"]
        held = self.held.get(loop)
        if held is not None and not held.connection.closed and held.database == database:
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
        # Django turns preparing off (None: for poolers); only what asks to be prepared is.
        params["prepare_threshold"] = _NEVER_BY_COUNT
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

    def close_all(self) -> None:
        """Close every connection (their loops may be gone: libpq's own close)."""
        held, self.held = self.held, {}
        if os.getpid() == self.pid:
            for each in held.values():
                each.connection.pgconn.finish()
        self.retry_at = 0.0


loop_database = LoopDatabase()


@register_reset
def loop_database_reset() -> None:
    """Tests point the settings at another database: every connection is made again."""
    loop_database.close_all()
