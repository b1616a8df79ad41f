"""A TCP relay in front of the real Redis, for the processes or threads a test points at
it: ``cut()`` closes every connection and closes new ones at once (Redis unreachable),
``restore()`` lets them through again. ``turn_delay`` holds each of the client's turns
(what it sends after Redis last answered it) that long: a Redis across a network, where
every round trip costs, while a pipeline's commands share one. ``cut_after_turns(n)`` cuts
at the start of the client's (n+1)-th turn from now. ``lose_reply_to(marker)`` lets the next
turn holding ``marker`` reach Redis and cuts when Redis answers it (the link lost while the
reply was on its way); ``hold_reply_to(marker, seconds)`` delays that reply instead."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit


class RedisRelay:
    def __init__(self, redis_url: str, *, turn_delay: float = 0.0):
        parts = urlsplit(redis_url)
        self.target = (parts.hostname, parts.port or 6379)
        self.turn_delay = turn_delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.listener.getsockname()[1]}"))
        self.down = False
        self.closed = False
        self.turns_left: int | None = None  # cut() when a client begins its turn after these
        self.watched: bytes | None = None  # the turn whose reply is lost or held
        self.reply_hold: float | None = None  # None: lose it; else hold it that long
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            answered = threading.Event()  # Redis answered since the client's last turn
            answered.set()
            watching = threading.Event()  # this pair's pending turn holds the watched marker
            for src, dst, asking in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(src, dst, pair, answered, watching, asking), daemon=True
                ).start()

    def _pump(self, src, dst, pair, answered: threading.Event, watching: threading.Event, asking: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if asking and answered.is_set():  # the client begins a turn
                    answered.clear()
                    if self.turns_left is not None:
                        if self.turns_left == 0:
                            self.cut()
                            return
                        self.turns_left -= 1
                    if self.turn_delay:
                        time.sleep(self.turn_delay)
                if asking and self.watched is not None and self.watched in data:
                    self.watched = None
                    watching.set()
                elif not asking:
                    answered.set()
                    if watching.is_set():
                        watching.clear()
                        if self.reply_hold is None:
                            self.cut()
                            return
                        time.sleep(self.reply_hold)
                dst.sendall(data)
        self._drop(pair)

    def _drop(self, pair) -> None:
        with self._lock:
            self._pairs.discard(pair)
        for s in pair:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def cut(self) -> None:
        self.down = True
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)

    def cut_after_turns(self, turns: int) -> None:
        """Let the clients' next ``turns`` turns through, then cut at the start of the one
        after: a Redis lost between two steps of the same work."""
        self.turns_left = turns

    def lose_reply_to(self, marker: bytes) -> None:
        """The next turn holding ``marker`` reaches Redis; its reply does not come back (cut)."""
        self.watched, self.reply_hold = marker, None

    def hold_reply_to(self, marker: bytes, seconds: float) -> None:
        """The next turn holding ``marker`` reaches Redis; its reply comes back ``seconds`` late."""
        self.watched, self.reply_hold = marker, seconds

    def restore(self) -> None:
        self.down = False
        self.turns_left = None

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()
