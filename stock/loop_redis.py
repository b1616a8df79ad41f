"""The event loop's Redis connections: the commands of the purchases the server runs on its
loop (core.loop_bridge), written as they come on one connection per Redis and loop and
answered in order (Redis's own pipelining), with hiredis's packer and reader.

Why not redis-py's asyncio client: it packs each command in Python and takes a pooled
connection, a lock and a timeout task per command — measured in process, three times the
CPU of the whole synchronous command, so a purchase on the loop cost as much as one on a
thread (docs/DESIGN-NOTES.md, "A purchase runs on the event loop when it only waits on
Redis"). Here a command is one C call to pack, one write, and a future resolved when its
reply is read; the commands of the purchases of one turn of the loop leave in one write.

What a reply becomes is redis-py's to say: the caller applies its client's response
callbacks (``stock.redis_client``), so a command answers the same on the loop as on a
thread. An error reply is raised as redis-py raises it (``NoScriptError`` for NOSCRIPT);
a connection lost or a reply later than the client's socket timeout fails every command
waiting on the connection with redis-py's ``ConnectionError`` / ``TimeoutError``, and the
next command connects again: a command whose reply was lost may have run, as on a thread.
"""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from urllib.parse import unquote, urlsplit

import hiredis
import redis

from core.memory import register_reset

# As the threads' clients (stock.redis_client.CLIENT_OPTIONS).
CONNECT_TIMEOUT = 0.5
REPLY_TIMEOUT = 2.0
# After a failed connect, the next ones wait this long: until then commands fail at once.
RETRY_AFTER = 1.0


class LoopRedis(asyncio.Protocol):
    def __init__(self, url: str):
        self.url = url
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[asyncio.Future] = collections.deque()
        self.outgoing: list[bytes] = []
        self.connecting: asyncio.Lock | None = None
        self.retry_at = 0.0

    # --- the protocol ---------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport, self.outgoing = None, []
        self._failed(redis.ConnectionError(f"Redis connection lost: {exc or 'closed by the server'}"))

    # --- the commands -----------------------------------------------------------------------

    async def execute(self, *commands: tuple) -> list:
        """The replies to ``commands`` (each a command's arguments), in order; an error
        reply is returned as the exception redis-py would raise, not raised."""
        transport = await self._connected()
        futures = self._sent(transport, commands)
        try:
            async with asyncio.timeout(REPLY_TIMEOUT):
                replies = [await future for future in futures]
        except TimeoutError:
            self._drop(redis.TimeoutError("Timeout reading from Redis (the loop's connection)"))
            raise redis.TimeoutError("Timeout reading from Redis") from None
        return [_error_of(reply) if isinstance(reply, hiredis.ReplyError) else reply for reply in replies]

    def _sent(self, transport: asyncio.Transport, commands: tuple) -> list[asyncio.Future]:
        """Queued for the end of this turn of the loop: the commands of every purchase that
        runs in it leave in one write (a system call and a segment, not one each)."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in commands]
        self.waiting.extend(futures)
        if not self.outgoing:
            loop.call_soon(self._flush, transport)
        self.outgoing.extend(hiredis.pack_command(_words(args)) for args in commands)
        return futures

    def _flush(self, transport: asyncio.Transport) -> None:
        data, self.outgoing = b"".join(self.outgoing), []
        if not transport.is_closing():
            transport.write(data)

    async def _connected(self) -> asyncio.Transport:
        if self.transport is not None and not self.transport.is_closing():
            return self.transport
        if self.connecting is None:
            self.connecting = asyncio.Lock()
        async with self.connecting:
            if self.transport is None or self.transport.is_closing():
                if time.monotonic() < self.retry_at:
                    # A connect failed moments ago: the commands waiting behind it fail at once
                    # rather than each wait for the same timeout.
                    raise redis.ConnectionError("Redis unreachable (the loop's connection failed just now)")
                try:
                    await self._connect()
                except redis.RedisError:
                    self.retry_at = time.monotonic() + RETRY_AFTER
                    raise
        if self.transport is None or self.transport.is_closing():
            raise redis.ConnectionError("Redis closed the loop's connection")
        return self.transport

    async def _connect(self) -> None:
        parts = urlsplit(self.url)
        loop = asyncio.get_running_loop()
        self.reader = hiredis.Reader()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                if parts.scheme == "unix":
                    transport, _ = await loop.create_unix_connection(lambda: self, parts.path)
                else:
                    transport, _ = await loop.create_connection(
                        lambda: self, parts.hostname or "localhost", parts.port or 6379, ssl=parts.scheme == "rediss"
                    )
        except (TimeoutError, OSError) as exc:
            raise redis.ConnectionError(f"Error connecting to Redis at {parts.hostname}:{parts.port}: {exc}") from exc
        self.transport = transport
        setup = []
        if parts.password:
            user = unquote(parts.username) if parts.username else None
            setup.append(("AUTH", user, unquote(parts.password)) if user else ("AUTH", unquote(parts.password)))
        database = parts.path.strip("/") or "0"
        if database != "0":
            setup.append(("SELECT", database))
        if setup:
            futures = self._sent(transport, tuple(setup))
            try:
                async with asyncio.timeout(REPLY_TIMEOUT):
                    replies = [await future for future in futures]
            except TimeoutError:
                self._drop(redis.TimeoutError("Timeout setting up the loop's Redis connection"))
                raise redis.TimeoutError("Timeout setting up the loop's Redis connection") from None
            for reply in replies:
                if isinstance(reply, hiredis.ReplyError):
                    error = _error_of(reply)
                    self._drop(error)
                    raise error

    def _drop(self, error: Exception) -> None:
        transport, self.transport = self.transport, None
        self.outgoing = []
        if transport is not None:
            transport.abort()
        self._failed(error)

    def _failed(self, error: Exception) -> None:
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)


def _words(args: tuple) -> tuple:
    """A command name of two words (``SCRIPT LOAD``, ``CLIENT KILL``) is two arguments, as
    redis-py sends it."""
    name = args[0]
    if isinstance(name, str) and " " in name:
        return (*name.split(), *args[1:])
    return args


def _error_of(reply: hiredis.ReplyError) -> redis.ResponseError:
    message = str(reply)
    if message.startswith("NOSCRIPT"):
        return redis.exceptions.NoScriptError(message)
    return redis.ResponseError(message)


# One per event loop and Redis URL (a connection belongs to its loop; a loop that is gone
# takes its connections with it).
_connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, LoopRedis]] = weakref.WeakKeyDictionary()


def loop_redis(url: str) -> LoopRedis:
    per_url = _connections.setdefault(asyncio.get_running_loop(), {})
    connection = per_url.get(url)
    if connection is None:
        connection = per_url[url] = LoopRedis(url)
    return connection


@register_reset
def loop_redis_reset() -> None:
    _connections.clear()
