"""Structured logs: a request id on every log line of a request, and a JSON format.

``RequestIdMiddleware`` takes the caller's ``X-Request-ID`` (from a proxy or a load
balancer, when it looks sane) or makes one, keeps it in a context variable for the
request's duration and answers with it. ``RequestIdFilter`` puts it on every record
(``-`` outside a request: Celery, beat, commands). ``DJANGO_LOG_FORMAT=json`` switches
the console to :class:`JsonFormatter`, one JSON object per line.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from contextvars import ContextVar

from seckill.middleware import SHARED_PAGE_ATTR

HEADER = "X-Request-ID"
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
request_id_var: ContextVar[str] = ContextVar("request_id", default="-")


def request_id_of(incoming: str) -> str:
    """The caller's id when it looks sane, else a new one."""
    return incoming if _SANE.match(incoming) else secrets.token_hex(16)


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = request_id_of(request.headers.get(HEADER, ""))
        request.request_id = request_id
        # Not reset on the way out: Django logs 4xx/5xx answers ("Not Found: …") after the
        # middleware chain returns, and that line should carry the id too. The next
        # request on this thread sets its own.
        request_id_var.set(request_id)
        response = self.get_response(request)
        # A page that is the same for every visitor (CDN-cached) carries no per-request id.
        if not getattr(response, SHARED_PAGE_ATTR, False):
            response[HEADER] = request_id
        return response


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, request id, process."""

    converter = staticmethod(time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
            "pid": record.process,
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
