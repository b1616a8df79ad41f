"""gunicorn's worker class (gunicorn.conf.py): uvicorn's, configured for this app, on an
event loop that accepts several waiting connections at each turn, and leaves a new
connection to a sibling worker that holds fewer (``ConnectionShares``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import select
import socket
import time
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
# A keep-alive connection stays with the worker that accepted it, for its whole life: a
# worker holding this many more than a sibling leaves the next one to the sibling.
SHARE_SLACK = 2
# How often a worker that left a waiting connection to a sibling looks again, and how long
# it leaves one at most (a sibling that is busy, stopped or gone must not hold it up).
ACCEPT_DEFER_S = 0.002
ACCEPT_DEFER_MAX_S = 0.05
# A worker says it is alive this often; a sibling silent for longer than FRESH_S is left
# out of the shares (busy in one long turn, or gone) until it speaks again.
BEAT_S = 0.25
FRESH_S = 1.0
# Workers one master may have at once with a share each (a worker past them accepts as if
# alone).
SHARE_SLOTS = 64


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

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # In the master, before the fork: the slot of the shares this worker will write.
        # None under reuse_port: each worker then has a socket of its own, and a connection
        # left in it would wait for nobody but this worker.
        self.share_slot = (
            None if self.cfg.reuse_port else connection_shares.claim(stale_after=self.cfg.timeout + FRESH_S)
        )

    def init_process(self) -> None:
        connection_shares.own(self.share_slot)
        super().init_process()


class HttpToolsProtocol(_HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``CoalescedWrites`` transport, counted in this
    worker's share of the connections."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        connection_shares.opened()
        # Not a Transport subclass: its base's methods would hide the real transport's.
        super().connection_made(typing.cast(asyncio.Transport, CoalescedWrites(transport, self.loop)))

    def connection_lost(self, exc: Exception | None) -> None:
        connection_shares.closed()
        super().connection_lost(exc)


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


class ConnectionShares:
    """How many connections each worker of one gunicorn master holds, in memory the master
    maps before it forks them: a worker holding ``SHARE_SLACK`` more than a sibling leaves
    a waiting connection to it (``BatchAcceptServer``).

    Why: the workers all wait on the one listening socket; an idle worker wakes first and
    takes every connection waiting. Keep-alive connections (a load balancer's pool, a load
    test's) then stay where they were taken: 50 opened at once were held 48 and 2, 43 and
    7, 35 and 15, and the worker with more answered each of them slower while the other
    core had little to do (docs/DESIGN-NOTES.md). Envoy's "exact balance" does the same
    between its threads.

    One slot per worker: its connections held (-1: claimed, not serving yet) and the
    monotonic time of its last beat in ms (0: free). Each worker writes its own slot only;
    a read of a sibling's may be a moment old, which costs at most one connection of
    balance."""

    def __init__(self, slots: int = SHARE_SLOTS):
        self.slots = slots
        self.memory = mmap.mmap(-1, slots * 16)  # anonymous and shared: the forked workers see one table
        self.table = memoryview(self.memory).cast("q")
        self.slot: int | None = None  # this worker's, once it serves

    def claim(self, *, stale_after: float) -> int | None:
        """In the master: a free slot, or one whose worker has said nothing for
        ``stale_after`` seconds (gone without freeing it); None when all are taken."""
        now, table = _now_ms(), self.table
        for slot in range(self.slots):
            beat = table[2 * slot + 1]
            if beat == 0 or now - beat > stale_after * 1000:
                table[2 * slot], table[2 * slot + 1] = -1, now
                return slot
        return None

    def own(self, slot: int | None) -> None:
        """In the worker: the slot the master claimed for it."""
        self.slot = slot

    def serving(self) -> None:
        """The worker accepts: counted from no connections."""
        if self.slot is not None:
            self.table[2 * self.slot] = 0
            self.beat()

    def beat(self) -> None:
        if self.slot is not None:
            self.table[2 * self.slot + 1] = _now_ms()

    def opened(self) -> None:
        if self.slot is not None:
            self.table[2 * self.slot] += 1

    def closed(self) -> None:
        if self.slot is not None:
            self.table[2 * self.slot] -= 1

    def freed(self) -> None:
        """The worker stops accepting: its slot is free for the worker that replaces it."""
        if self.slot is not None:
            self.table[2 * self.slot], self.table[2 * self.slot + 1] = -1, 0
            self.slot = None

    def ahead(self) -> bool:
        """This worker holds ``SHARE_SLACK`` or more connections than a sibling that
        serves and has beaten in the last ``FRESH_S``."""
        if self.slot is None:
            return False
        table, now = self.table, _now_ms()
        ahead_of = table[2 * self.slot] - SHARE_SLACK
        fresh_since = now - FRESH_S * 1000
        for slot in range(self.slots):
            held, beat = table[2 * slot], table[2 * slot + 1]
            if 0 <= held <= ahead_of and beat and beat >= fresh_since and slot != self.slot:
                return True
        return False


def _now_ms() -> int:
    return int(time.monotonic() * 1000)  # CLOCK_MONOTONIC: one clock for every process


connection_shares = ConnectionShares()


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
        # When the connections waiting now were first left to a sibling, and last seen waiting.
        self.deferred_since = self.deferred_seen = 0.0
        self.waiting = select.poll()  # whether connections still wait, once left to a sibling
        self.waiting.register(sock, select.POLLIN)
        sock.setblocking(False)
        sock.listen(backlog)
        connection_shares.serving()
        self.beating = loop.call_later(BEAT_S, self._beat)
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.sock,)

    def _accept(self) -> None:
        overdue = self._overdue()
        for accepted in range(self.batch):
            if not overdue and connection_shares.ahead():
                # Having just accepted, none may be waiting: the next turn looks again.
                return None if accepted else self._defer()
            try:
                conn, _address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                self.deferred_since = 0.0  # none waiting
                return
            except ConnectionAbortedError:
                continue  # the client gave up while it waited
            except OSError as exc:  # out of file descriptors or buffers: pause, as asyncio
                logger.error("accepting connections failed, retrying in %.0f s: %s", ACCEPT_RETRY_S, exc)
                self.loop.remove_reader(self.sock.fileno())
                self.loop.call_later(ACCEPT_RETRY_S, self._resume)
                return
            if not overdue:
                self.deferred_since = 0.0  # its turn here: no wait to count
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection_shares.opened()  # until its protocol counts it (connection_made)
            task = self.loop.create_task(self._start(conn))
            self.starting.add(task)
            task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task) -> None:
        self.starting.discard(task)
        connection_shares.closed()

    def _defer(self) -> None:
        """Leave the waiting connections to a sibling with fewer, and look again soon."""
        now = self.loop.time()
        if not self.deferred_since or now - self.deferred_seen > ACCEPT_DEFER_MAX_S:  # a new wait
            self.deferred_since = now
        self.deferred_seen = now
        self.loop.remove_reader(self.sock.fileno())
        self.loop.call_later(ACCEPT_DEFER_S, self._look_again)

    def _look_again(self) -> None:
        if not self.serving:
            return
        if self.waiting.poll(0):
            self.deferred_seen = self.loop.time()
        else:
            self.deferred_since = 0.0  # a sibling took them
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def _overdue(self) -> bool:
        """Connections seen waiting just now have waited ACCEPT_DEFER_MAX_S for a sibling
        (busy in a long turn, or stopped): this worker takes every one waiting after all.
        (A sibling that stops turning for longer than FRESH_S is left out of the shares.)"""
        now = self.loop.time()
        return (
            bool(self.deferred_since)
            and now - self.deferred_since >= ACCEPT_DEFER_MAX_S
            and now - self.deferred_seen <= ACCEPT_DEFER_MAX_S
        )

    def _beat(self) -> None:
        connection_shares.beat()
        self.beating = self.loop.call_later(BEAT_S, self._beat)

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
            self.beating.cancel()
            connection_shares.freed()
            with contextlib.suppress(ValueError, OSError):  # the socket is closed already
                self.loop.remove_reader(self.sock.fileno())

    async def wait_closed(self) -> None:
        if self.starting:
            await asyncio.gather(*self.starting, return_exceptions=True)
