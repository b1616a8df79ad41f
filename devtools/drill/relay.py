"""A TCP delay relay: the drill's latency where the kernel has no ``sch_netem``.

``python -m devtools.drill.relay DELAY_FILE LISTEN=UPSTREAM [LISTEN=UPSTREAM …]`` (each
``address:port``). For every accepted connection it opens one to the upstream and copies both
ways; each chunk read is written on after the one-way delay (in ms, read from DELAY_FILE at
start and again on SIGHUP), in the order it was read. The drill runs one relay in each
server's namespace, in front of the server: a client crosses it once each way, so a round
trip costs twice the delay (as netem's half on each end of both veths does).

Two threads per direction per connection (one reads and stamps, one waits until the stamp
is due and writes), so a delay of a fraction of a millisecond is kept to
``time.sleep``'s precision rather than an event loop's millisecond timer. A delay of 0
writes at once from the reading thread.
"""

from __future__ import annotations

import queue
import signal
import socket
import sys
import threading
import time
from pathlib import Path

CHUNK = 65536
_delay_s = 0.0


def _read_delay(path: Path) -> None:
    global _delay_s
    try:
        _delay_s = max(float(path.read_text().strip() or 0), 0.0) / 1000
    except (OSError, ValueError):
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _pipe(src: socket.socket, dst: socket.socket, done: threading.Event) -> None:
    """Copy ``src`` to ``dst``, each chunk delayed by the delay in force when it was read."""
    pending: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def writer() -> None:
        try:
            while True:
                due, data = pending.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                dst.sendall(data)
        except OSError:
            pass
        done.set()

    thread: threading.Thread | None = None
    try:
        while True:
            data = src.recv(CHUNK)
            delay = _delay_s
            if delay == 0 and thread is None:
                if not data:
                    break
                dst.sendall(data)
                continue
            if thread is None:
                thread = threading.Thread(target=writer, daemon=True)
                thread.start()
            pending.put((time.monotonic() + delay, data))
            if not data:
                break
    except OSError:
        pass
    if thread is None:
        done.set()
    else:
        pending.put((0.0, b""))
        thread.join()


def _serve(conn: socket.socket, upstream: tuple[str, int]) -> None:
    try:
        far = socket.create_connection(upstream, timeout=5)
    except OSError:
        _close(conn)
        return
    far.settimeout(None)
    for s in (conn, far):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = threading.Event()
    threads = [
        threading.Thread(target=_pipe, args=(conn, far, done), daemon=True),
        threading.Thread(target=_pipe, args=(far, conn, done), daemon=True),
    ]
    for t in threads:
        t.start()
    done.wait()  # one side closed: close both (a half-close is not needed by any client here)
    _close(conn)
    _close(far)


def _listening(listen: tuple[str, int]) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(listen)
    server.listen(4096)
    return server


def _accept(server: socket.socket, upstream: tuple[str, int]) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn, upstream), daemon=True).start()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> None:
    delay_file, pairs = Path(argv[0]), argv[1:]
    _read_delay(delay_file)
    signal.signal(signal.SIGHUP, lambda *_: _read_delay(delay_file))
    # Every address listens before the line that says the relay is ready (its readers
    # connect at once), and one that cannot be bound ends the relay before that line.
    servers = [(_listening(_address(listen)), _address(upstream)) for listen, upstream in (p.split("=") for p in pairs)]
    for server, upstream in servers:
        threading.Thread(target=_accept, args=(server, upstream), daemon=True).start()
    print(f"relay: {' '.join(pairs)}, {_delay_s * 1000:g} ms each way", flush=True)
    while True:  # SIGTERM's default action ends it
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
