"""The event loop's own database connection, for the one read a purchase on the loop makes:
a new shopper's token (seckill.purchase.authentication). Django's connections are per thread and
refuse the loop's; a hop to a thread for each look-up would cost what running the purchase
on the loop saves.

One psycopg ``AsyncConnection`` (psycopg's public async API) per process and event loop,
made from the parameters Django connects with, in autocommit, one statement at a time. Each
connection carries PostgreSQL's ``statement_timeout`` (WEB_STATEMENT_TIMEOUT, as Django's
connections of the web tier: server.app), and a statement the loop stops waiting for is
cancelled (``cancel_safe``), so no backend goes on working for nobody. The database away,
refusing or too slow is Django's ``OperationalError``: the purchase answers 503 busy, as
for any query. A connection that failed is dropped; the next read makes a new one.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

import psycopg
from django.conf import settings
from django.db import OperationalError, connections

from .memory import register_reset

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 3.0

# One per event loop (a web worker has one; tests make many, and a loop that is gone takes
# its connection with it).
_databases: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopDatabase] = weakref.WeakKeyDictionary()


class LoopDatabase:
    def __init__(self) -> None:
        self.connection: psycopg.AsyncConnection | None = None
        self.lock = asyncio.Lock()  # one statement at a time: their messages share the socket
        self.batches: dict[str, dict[str, asyncio.Future]] = {}

    async def fetch_keyed(self, sql: str, key: str) -> tuple | None:
        """The rest of the row whose first column is ``key``, or None: one statement
        (``sql`` takes the keys as ``ANY(%s)``) for every key asked for in this turn of the
        loop — the new shoppers of a flood's moment cost one round trip, not one each."""
        loop = asyncio.get_running_loop()
        batch = self.batches.get(sql)
        if batch is None:
            batch = self.batches[sql] = {}
            loop.call_soon(lambda: loop.create_task(self._batch_run(sql)))
        future = batch.get(key)
        if future is None:
            future = batch[key] = loop.create_future()
        return await future

    async def _batch_run(self, sql: str) -> None:
        batch = self.batches.pop(sql)
        try:
            rows = await self.fetch_all(sql, [list(batch)])
        except Exception as exc:
            for future in batch.values():
                if not future.done():
                    future.set_exception(exc)
            return
        found = {row[0]: row[1:] for row in rows}
        for key, future in batch.items():
            if not future.done():
                future.set_result(found.get(key))

    async def fetch_all(self, sql: str, params: list[Any]) -> list[tuple]:
        deadline = settings.WEB_STATEMENT_TIMEOUT
        async with self.lock:
            connection = await self._connected()
            try:
                async with asyncio.timeout(deadline):
                    cursor = await connection.execute(sql, params, prepare=True)
                    return await cursor.fetchall()
            except TimeoutError:
                await self._dropped(cancel=True)
                raise OperationalError(f"the loop's database read took over {deadline} s; cancelled") from None
            except psycopg.Error as exc:
                await self._dropped(cancel=False)
                raise OperationalError(str(exc)) from exc

    async def _connected(self) -> psycopg.AsyncConnection:
        if self.connection is not None and not self.connection.closed:
            return self.connection
        params = connections["default"].get_connection_params()
        params.pop("cursor_factory", None)  # Django's own cursor class is for its connections
        timeout = int(settings.WEB_STATEMENT_TIMEOUT * 1000)
        options = f"{params.pop('options', '')} -c statement_timeout={timeout}".strip()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                self.connection = await psycopg.AsyncConnection.connect(**params, options=options, autocommit=True)
        except (TimeoutError, psycopg.Error) as exc:
            raise OperationalError(f"the loop's database connection failed: {exc}") from exc
        return self.connection

    async def _dropped(self, *, cancel: bool) -> None:
        connection, self.connection = self.connection, None
        if connection is None:
            return
        try:
            if cancel:
                await connection.cancel_safe(timeout=CONNECT_TIMEOUT)
            await connection.close()
        except (psycopg.Error, OSError) as exc:
            logger.warning("the loop's database connection did not close cleanly: %s", exc)


def loop_database() -> LoopDatabase:
    """This event loop's database connection (made on first use)."""
    loop = asyncio.get_running_loop()
    database = _databases.get(loop)
    if database is None:
        database = _databases[loop] = LoopDatabase()
    return database


@register_reset
def loop_database_reset() -> None:
    """Forget every loop's connection (tests point the settings at another database)."""
    _databases.clear()
