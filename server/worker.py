"""gunicorn's worker class (gunicorn.conf.py): uvicorn's, with its limits set, and the two
limits uvicorn lacks.

nginx stands in front (deploy/nginx/shop.conf) and holds every slow or oversized client;
these limits are for the day gunicorn is reached without it:

* ``limit_concurrency``: connections and requests a worker takes at once before it answers
  503 (uvicorn's own);
* ``timeout_keep_alive``: an idle keep-alive connection is closed after gunicorn's
  ``keepalive`` seconds (uvicorn's own, set from gunicorn's setting);
* **a request head's deadline and size** (``HttpToolsProtocol``): uvicorn's httptools
  protocol reads a request head for as long as a client sends it, of any size, and keeps a
  connection that never sends a byte for ever — 300 idle connections, or four unfinished
  50 MB header lines, were held until the worker ran out of files or memory. The subclass
  closes a connection whose head has not arrived within ``HEAD_TIMEOUT`` (408) or has grown
  past ``HEAD_MAX`` bytes (431). It hooks uvicorn's protocol, which is not a public API:
  tests/server/test_pinned_internals.py fails when the pinned uvicorn changes the hooks, and
  docs/DESIGN-NOTES.md ("The app server's own limits") says what it buys over uvicorn's h11
  protocol, whose header cap is public but which has neither deadline nor its speed.

No proxy-header rewriting: uvicorn would take the client's address and scheme from
``X-Forwarded-*`` sent from a trusted peer; the app decides which proxy it trusts
(``SECKILL_TRUSTED_PROXY_HEADER``, ``SECURE_PROXY_SSL_HEADER``), so ``REMOTE_ADDR`` stays the
socket's, as under any WSGI server.
"""

from __future__ import annotations

import asyncio
import logging
import os

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HttpToolsProtocol
from uvicorn_worker import UvicornWorker as _UvicornWorker

from server.request_log import QuietPollFilter

# A request head (request line and headers) must arrive within this many seconds of its
# first byte — or of the connection, for its first request — and be at most this large
# (nginx's client_header_timeout and large_client_header_buffers do the same in front).
HEAD_TIMEOUT = float(os.environ.get("WEB_HEAD_TIMEOUT", "10"))
HEAD_MAX = 64 * 1024
# Connections and requests in progress per worker before uvicorn answers 503.
LIMIT_CONCURRENCY = int(os.environ.get("WEB_LIMIT_CONCURRENCY", "2048"))
# The polls that went well are not in the access log (DJANGO_LOG_POLLS=true: they are).
logging.getLogger("uvicorn.access").addFilter(QuietPollFilter())


def _refusal(status: str, code: str, detail: str) -> bytes:
    body = f'{{"code": "{code}", "detail": "{detail}"}}'.encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + body


TOO_SLOW = _refusal("408 Request Timeout", "request_timeout", "The request did not arrive in time.")
TOO_LARGE = _refusal("431 Request Header Fields Too Large", "headers_too_large", "The request's headers are too large.")


class HttpToolsProtocol(_HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size cap for each request head."""

    head_timer: asyncio.TimerHandle | None = None
    head_size = 0
    awaiting_head = True

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.head_timer = self.loop.call_later(HEAD_TIMEOUT, self.head_refused, TOO_SLOW)

    def data_received(self, data: bytes) -> None:
        if self.awaiting_head and self.head_timer is None:  # the first bytes of the next request
            self.head_timer = self.loop.call_later(HEAD_TIMEOUT, self.head_refused, TOO_SLOW)
        super().data_received(data)
        if self.awaiting_head:  # counted once parsed: the bytes after a complete head are the body's
            self.head_size += len(data)
            if self.head_size > HEAD_MAX:
                self.head_refused(TOO_LARGE)

    def on_headers_complete(self) -> None:
        self.awaiting_head, self.head_size = False, 0
        self.head_timer_cancel()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.awaiting_head = True  # until its first byte the keep-alive timeout watches the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_timer_cancel()
        super().connection_lost(exc)

    def head_refused(self, answer: bytes) -> None:
        self.head_timer_cancel()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()

    def head_timer_cancel(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None


class UvicornWorker(_UvicornWorker):
    """uvloop and httptools by name, not "auto": a machine without them fails at start-up
    instead of serving at a fraction of the speed."""

    CONFIG_KWARGS = {
        "loop": "uvloop",
        "http": "server.worker:HttpToolsProtocol",
        "proxy_headers": False,
        "limit_concurrency": LIMIT_CONCURRENCY,
    }
