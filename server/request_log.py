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
import os
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


# What a browser or a load balancer asks again every second or few: the sale's flag (and
# its script), the waiting room's status, a purchase's result, the health probes. Each
# answer that went well is one access line per shopper per poll — most of the log.
POLL_PATH = re.compile(r"^(/api/activities/\d+/(flag|room|result)|/seckill/\d+/flag\.js|/api/ping|/healthz)(\?|$)")


class QuietPollFilter(logging.Filter):
    """Drop uvicorn's access line of a poll answered 2xx/3xx (``quiet``: unless
    ``DJANGO_LOG_POLLS=true``). A poll that failed is logged as any request. On the
    ``uvicorn.access`` logger (server.worker), whose handlers gunicorn sets."""

    def __init__(self, quiet: bool | None = None):
        super().__init__()
        if quiet is None:
            quiet = os.environ.get("DJANGO_LOG_POLLS", "").lower() not in ("1", "true", "yes", "on")
        self.quiet = quiet

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn's access record: (client, method, path with query, HTTP version, status).
        args = record.args
        if not self.quiet or not isinstance(args, tuple) or len(args) != 5:
            return True
        path, status = args[2], args[4]
        return not (isinstance(status, int) and status < 400 and POLL_PATH.match(str(path)))


class ClientErrorFilter(logging.Filter):
    """On the console: leave out ``django.request``'s WARNING line of a 4xx answer ("Not
    Found: /x"), whose request already has its access line (status, path, client): one
    line per request. The record itself stays (for tests, for other handlers). A 5xx is
    printed, with its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        return not (record.name == "django.request" and isinstance(status, int) and 400 <= status < 500)
