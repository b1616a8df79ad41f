"""gunicorn's worker class (gunicorn.conf.py): uvicorn's, configured for this app, on an
event loop that accepts several waiting connections at each turn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import typing

import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HttpToolsProtocol
from uvicorn_worker import UvicornWorker as _UvicornWorker

logger = logging.getLogger(__name__)

# How long a worker out of file descriptors waits before it accepts again (as asyncio).
ACCEPT_RETRY_S = 1.0
# Connections accepted per turn of the loop: a busy worker (a turn of ~0.1 s) takes a burst
# of new connections within a few turns, and two idle ones share it (with every waiting
# connection taken at once, one worker now and then took all of a run's 50 and the other
# none: keep-alive connections stay where they were accepted).
ACCEPT_PER_TURN = 16


class UvicornWorker(_UvicornWorker):
    """uvloop (``BatchAcceptLoop``) and httptools by name, not "auto": a machine without
    them fails at start-up instead of serving at a fraction of the speed. No proxy-header
    rewriting: uvicorn would take the client's address and scheme from ``X-Forwarded-*``
    sent from a trusted peer; the app decides which proxy it trusts
    (``SECKILL_TRUSTED_PROXY_HEADER``, ``SECURE_PROXY_SSL_HEADER``), so ``REMOTE_ADDR``
    stays the socket's, as under any WSGI server."""

    CONFIG_KWARGS = {
        "loop": "config.workers:BatchAcceptLoop",
        "http": "config.workers:HttpToolsProtocol",
        "proxy_headers": False,
    }


class HttpToolsProtocol(_HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``CoalescedWrites`` transport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Not a Transport subclass: its base's methods would hide the real transport's.
        super().connection_made(typing.cast(asyncio.Transport, CoalescedWrites(transport, self.loop)))


class CoalescedWrites:
    """A transport whose writes of one turn of the loop go out together. uvicorn writes
    an answer's status line and headers, then its body: two writes, and uvloop sends each
    at once, so every answer cost two ``send`` calls and two TCP segments (the client
    reads both). A write is held; the next one sends both, and a write left alone goes at
    the end of the turn. The rest is the transport's own."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop, self._held = transport, loop, b""

    def write(self, data) -> None:
        if self._held:
            data, self._held = self._held + data, b""
            self._transport.write(data)
        elif data:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)

    def writelines(self, lines) -> None:
        self.write(b"".join(lines))

    def flush(self) -> None:
        if self._held:
            data, self._held = self._held, b""
            if not self._transport.is_closing():
                self._transport.write(data)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class BatchAcceptLoop(uvloop.Loop):
    """uvloop, except that a plain-TCP server on a listening socket (what uvicorn starts
    in a gunicorn worker) accepts up to ``ACCEPT_PER_TURN`` waiting connections at each
    turn of the loop, as asyncio's own loop accepts several. libuv accepts one per turn
    (libuv#3696), and a loop busy with a hundred connections turns about ten times a
    second: at a sale's start the rest of the flood's new connections waited seconds to
    be accepted (200 connections: the first answer on a connection up to 3 s, every later
    one under 0.5 s)."""

    async def create_server(
        self, protocol_factory, host=None, port=None, *, sock=None, ssl=None, backlog=100, **kwargs
    ):
        if sock is None or ssl is not None or kwargs or sock.type != socket.SOCK_STREAM:
            return await super().create_server(
                protocol_factory, host, port, sock=sock, ssl=ssl, backlog=backlog, **kwargs
            )
        return BatchAcceptServer(self, protocol_factory, sock, backlog)


class BatchAcceptServer:
    """A listening socket served by ``BatchAcceptLoop``: what uvicorn uses of an
    ``asyncio.Server`` (``sockets``, ``close``, ``wait_closed``). Each connection goes to
    ``loop.connect_accepted_socket``, uvloop's own transport from then on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol_factory, sock: socket.socket, backlog: int):
        self.loop, self.protocol_factory, self.sock = loop, protocol_factory, sock
        self.batch = max(1, min(backlog, ACCEPT_PER_TURN))
        self.starting: set[asyncio.Task] = set()
        self.serving = True
        sock.setblocking(False)
        sock.listen(backlog)
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.sock,)

    def _accept(self) -> None:
        for _ in range(self.batch):
            try:
                conn, _address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # none waiting
            except ConnectionAbortedError:
                continue  # the client gave up while it waited
            except OSError as exc:  # out of file descriptors or buffers: pause, as asyncio
                logger.error("accepting connections failed, retrying in %.0f s: %s", ACCEPT_RETRY_S, exc)
                self.loop.remove_reader(self.sock.fileno())
                self.loop.call_later(ACCEPT_RETRY_S, self._resume)
                return
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self.loop.create_task(self._start(conn))
            self.starting.add(task)
            task.add_done_callback(self.starting.discard)

    async def _start(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.protocol_factory, conn)
        except OSError as exc:  # the client went away before its transport was made
            logger.debug("accepted connection lost at once: %s", exc)
            conn.close()

    def _resume(self) -> None:
        if self.serving:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting; uvicorn closes the socket itself (gunicorn's master shares it)."""
        if self.serving:
            self.serving = False
            with contextlib.suppress(ValueError, OSError):  # the socket is closed already
                self.loop.remove_reader(self.sock.fileno())

    async def wait_closed(self) -> None:
        if self.starting:
            await asyncio.gather(*self.starting, return_exceptions=True)
