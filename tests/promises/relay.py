"""A TCP relay in front of the real Redis, for the processes or threads a test points at
it: ``cut()`` closes every connection and closes new ones at once (Redis unreachable),
``restore()`` lets them through again. ``turn_delay`` holds each of the client's turns
(what it sends after Redis last answered it) that long: a Redis across a network, where
every round trip costs, while a pipeline's commands share one. ``cut_after_turns(n)`` cuts
at the start of the client's (n+1)-th turn from now."""

from __future__ import annotations

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
            threading.Thread(target=self._pump, args=(client, upstream, pair, answered, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, pair, answered, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair, answered: threading.Event, asking: bool) -> None:
        try:
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
                elif not asking:
                    answered.set()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(pair)

    def _drop(self, pair) -> None:
        with self._lock:
            self._pairs.discard(pair)
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
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

    def restore(self) -> None:
        self.down = False
        self.turns_left = None

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()
