"""The drill's delay relay (devtools/drill/relay.py), the latency where the kernel has no
netem: every byte arrives, in order, each way delayed by at least the configured one-way
delay (a lower bound, which no machine's load can break); SIGHUP changes the delay of a
connection already open; a server that is down closes the client's connection at once
instead of leaving it hanging. Loopback only: no namespace or root needed."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ..helpers import BASE_DIR, free_port, wait_until


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.fixture
def relay(tmp_path):
    started: list[subprocess.Popen] = []

    def start(upstream_port: int, delay_ms: float) -> tuple[int, object]:
        delay_file = tmp_path / f"delay-{len(started)}"
        delay_file.write_text(str(delay_ms))
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.drill.relay", str(delay_file),
             f"127.0.0.1:{port}=127.0.0.1:{upstream_port}"],
            cwd=BASE_DIR, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(proc)
        assert "relay:" in (proc.stdout.readline() if proc.stdout else "")

        def set_delay(ms: float) -> None:
            delay_file.write_text(str(ms))
            proc.send_signal(signal.SIGHUP)

        return port, set_delay

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


def _round_trip(sock: socket.socket, payload: bytes) -> tuple[bytes, float]:
    sent = time.monotonic()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        assert chunk, "the relay closed the connection"
        got += chunk
    return got, time.monotonic() - sent


def test_every_byte_arrives_in_order_delayed_each_way(relay):
    server, upstream = _echo_server()
    port, _ = relay(upstream, 40)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            # Many small writes back to back: the relay reads them in chunks of its own making
            # and must write them on in the order read.
            messages = [f"{i:06d};".encode() for i in range(5000)]
            sender = threading.Thread(target=lambda: [sock.sendall(m) for m in messages])
            sender.start()
            expected = b"".join(messages)
            got = b""
            while len(got) < len(expected):
                chunk = sock.recv(65536)
                assert chunk, "the relay closed the connection"
                got += chunk
            sender.join()
            assert got == expected
            # One way in to the server and one way back: at least twice the one-way delay.
            echoed, took = _round_trip(sock, b"ping")
            assert echoed == b"ping"
            assert took >= 2 * 0.040, took
    finally:
        server.close()


def test_sighup_changes_the_delay_of_an_open_connection(relay):
    server, upstream = _echo_server()
    port, set_delay = relay(upstream, 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            assert _round_trip(sock, b"before")[0] == b"before"
            set_delay(150)
            # The signal is handled asynchronously: wait until a round trip shows the new delay.
            wait_until(lambda: _round_trip(sock, b"after")[1] >= 2 * 0.150, timeout=30,
                       what="the new delay on the open connection")  # fmt: skip
    finally:
        server.close()


def test_a_server_that_is_down_closes_the_clients_connection(relay):
    port, _ = relay(free_port(), 5)  # nothing listens upstream
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.settimeout(10)
        try:
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass


def test_the_relay_listens_before_it_says_it_is_ready(tmp_path):
    """The drill and these tests connect as soon as the relay's first line is out, so every
    address is bound before that line: one that cannot be bound (another socket listens
    there) ends the relay without it. (Bound in threads after the line, the relay said it
    was ready regardless, and its readers now and then met a closed port.)"""
    delay_file = tmp_path / "delay"
    delay_file.write_text("0")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        pair = f"127.0.0.1:{taken.getsockname()[1]}=127.0.0.1:{free_port()}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.drill.relay", str(delay_file), pair],
            cwd=BASE_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:  # still running without its address: read what it said
            proc.kill()
            out, err = proc.communicate()
    assert "relay:" not in out, "it said it was ready with an address it could not listen on"
    assert proc.returncode != 0 and "Address already in use" in err, (proc.returncode, err[-300:])
