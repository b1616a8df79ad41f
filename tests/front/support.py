"""Clients and a stand-in upstream for the front door's tests: requests as raw bytes (the
malformed and the oversized ones no HTTP library sends), from a chosen loopback address,
and an upstream that records exactly what nginx forwards."""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def port_of(base: str) -> int:
    return urlsplit(base).port or 80


def request(
    base: str,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    source: str | None = None,
) -> Answer:
    """One request with http.client, from the loopback address ``source`` (127.0.0.2, …:
    all of 127/8 is this machine) when given. Header names go out as written, underscores
    included."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", port_of(base), timeout=30, source_address=(source, 0) if source else None
    )
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def raw(base: str, data: bytes, *, timeout: float = 10.0) -> Answer:
    """``data`` as sent, on a new connection; the answer read until nginx closes the
    connection or the one answer is complete."""
    with socket.create_connection(("127.0.0.1", port_of(base)), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # nginx answered and closed before taking everything: read its answer
        return read_answer(sock)


def read_answer(sock: socket.socket) -> Answer:
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {received!r}")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Answer(int(status_line.split()[1]), headers, body[:length])


def assert_json_error(answer: Answer, status: int, code: str) -> None:
    """The contract's error: that status, JSON, ``{"code", "detail"}``."""
    assert answer.status == status, (answer.status, answer.headers, answer.body[:300])
    assert answer.headers["content-type"] == "application/json", answer.headers
    body = answer.json()
    assert body["code"] == code and isinstance(body["detail"], str) and body["detail"], body


@dataclass
class Forwarded:
    """One request as the upstream received it."""

    request_line: str
    headers: list[tuple[str, str]]  # as received: names as nginx wrote them, in order
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def path(self) -> str:
        return self.request_line.split()[1].split("?")[0]

    def header(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]


class RecordingUpstream:
    """A stand-in for gunicorn on a free loopback port: records every request nginx
    forwards and answers 200 ``{"ok": true, "n": <requests so far>}`` on keep-alive
    connections, with the extra headers (and after the delay) ``answer()`` set for a path."""

    def __init__(self) -> None:
        self.requests: list[Forwarded] = []
        self.answers: dict[str, tuple[list[tuple[str, str]], float]] = {}
        upstream = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while True:
                    request_line = self.rfile.readline().decode("latin1").rstrip("\r\n")
                    if not request_line:
                        return
                    headers = []
                    while (line := self.rfile.readline().decode("latin1").rstrip("\r\n")) != "":
                        name, _, value = line.partition(":")
                        headers.append((name, value.strip()))
                    length = sum(int(v) for k, v in headers if k.lower() == "content-length")
                    forwarded = Forwarded(request_line, headers, self.rfile.read(length))
                    upstream.requests.append(forwarded)
                    extra, delay = upstream.answers.get(forwarded.path, ([], 0.0))
                    time.sleep(delay)  # the app taking its time to render
                    body = b'{"ok": true, "n": %d}' % len(upstream.requests)
                    head = "".join(f"{name}: {value}\r\n" for name, value in extra)
                    self.wfile.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s"
                        b"Content-Length: %d\r\n\r\n%s" % (head.encode(), len(body), body)
                    )
                    self.wfile.flush()

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str, *headers: tuple[str, str], delay: float = 0.0) -> None:
        self.answers[path] = (list(headers), delay)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
