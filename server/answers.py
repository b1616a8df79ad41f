"""The JSON answers the server gives itself — a purchase's, and its refusals of a request it
cannot read (a body too large or too slow) — built in one place, with the headers Django's
API chain puts on every answer.

Those headers are Django's to decide: SecurityMiddleware is asked once per scheme (what it
adds to a response of a request over http, and over https) and its answer is reused, so a
setting that changes them (``SECURE_HSTS_SECONDS``, ``SECURE_REFERRER_POLICY``…) changes
both kinds of answer alike. ``tests/server/test_answers.py`` compares every answer given
here with the same answer given by the API chain, so a middleware added to that chain
that adds a header fails it until it is added here too.
"""

from __future__ import annotations

import functools
import io
import json

from django.core.handlers.wsgi import WSGIRequest
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpResponse
from django.middleware.security import SecurityMiddleware
from django.utils.log import log_response

from core.errors import ApiError
from core.log_filters import rejection_expected
from server.request_log import HEADER as REQUEST_ID_HEADER

Headers = tuple[tuple[bytes, bytes], ...]
_REQUEST_ID = REQUEST_ID_HEADER.lower().encode("ascii")


@functools.cache
def api_headers(secure: bool) -> Headers:
    """What SecurityMiddleware adds to an answer, for a request over https or not."""
    environ = {
        "REQUEST_METHOD": "POST",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "https" if secure else "http",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "443" if secure else "80",
    }
    empty = HttpResponse()
    del empty["Content-Type"]
    response = SecurityMiddleware(lambda request: empty).process_response(WSGIRequest(environ), empty)
    return tuple((name.lower().encode("ascii"), value.encode("latin1")) for name, value in response.items())


@receiver(setting_changed)
def _settings_changed(**kwargs) -> None:
    api_headers.cache_clear()


@functools.lru_cache(maxsize=64)
def error_body(status: int, code: str, detail: str) -> bytes:
    """A refusal's body, encoded once: a flood's refusals are a handful of texts (bounded,
    so made-up texts could not grow it — none comes from the request)."""
    return json.dumps({"code": code, "detail": detail}).encode()


async def send_json(
    send, status: int, body: bytes, *, secure: bool, request_id: str, extra: dict[str, str] | None = None
) -> None:
    headers = [
        (b"content-type", b"application/json"),
        *api_headers(secure),
        (b"content-length", str(len(body)).encode("ascii")),
        (_REQUEST_ID, request_id.encode("ascii")),
        *((name.lower().encode("ascii"), value.encode("latin1")) for name, value in (extra or {}).items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send, error: ApiError, *, secure: bool, request_id: str, path: str, close: bool = False, logged: bool = True
) -> None:
    """A refusal, logged as Django logs a 4xx or 5xx (``log_response``) unless it is one of
    a flood's expected refusals (core.log_filters), as the API chain does, or ``logged`` is
    false: an answer the same for everyone, given by the thousand a second (counted in the
    purchase metric, never logged)."""
    if logged and not rejection_expected(error.status, error.code):
        response = HttpResponse(status=error.status)
        log_response("%s: %s", response.reason_phrase, path, response=response)
    body = error_body(error.status, error.code, error.detail)
    extra = {**error.headers(), "Connection": "close"} if close else error.headers()
    await send_json(send, error.status, body, secure=secure, request_id=request_id, extra=extra)
