"""What gunicorn serves: ``config.asgi.application`` (uvicorn workers), and behind it two
middleware stacks over one URLconf.

**Two stacks.** A request to the JSON API that authenticates with ``Authorization: Token …``
uses none of what a browser's request needs: no session, CSRF (DRF exempts token
requests), auth middleware (DRF authenticates), locale, messages, static files, login
throttling (axes guards the login views) or CSP and frame headers (JSON is neither
rendered nor framed). In a flash sale that is nearly every request, so it runs through
the short ``API_MIDDLEWARE``; everything else through ``MIDDLEWARE``. Same URLconf, same
views: only the stack around them differs (``StackDispatcher``, a WSGI application).

**The server.** uvicorn (uvloop, httptools) parses HTTP in C; Django's views stay
synchronous and run on a thread pool, as under gunicorn's threaded workers
(a2wsgi's ``WSGIMiddleware`` runs ``StackDispatcher`` there). Django's own ASGI handler
is not used: it hops threads several times per request and runs every synchronous view
on one thread per process (``thread_sensitive``), which measured a third of the threaded
WSGI server's throughput on the bare view.

**The API calls.** ``TokenApiFastPath`` hands a token-authenticated API call (the
flood's purchases, the shoppers' result polling) to the same API handler — the same
middleware instances, URL resolution and views, so every rule keeps its one home — with
one call onto the same thread pool, without a2wsgi's per-request machinery (a WSGI
environ, a body and a response queue, a second hop back to the event loop).
docs/BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import django
from django.conf import settings
from django.core import signals
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.core.handlers.asgi import ASGIRequest
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.urls import set_script_prefix
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from config.front import EarlyAnswers

# Threads per process for the synchronous views: as many requests as one process has in
# flight while others wait on Redis or PostgreSQL (and as many database connections).
DEFAULT_WEB_THREADS = 16
# An API call's body is a few dozen bytes; a larger one is read by Django's usual path.
FAST_PATH_MAX_BODY = 4096


def web_threads() -> int:
    return int(os.environ.get("GUNICORN_THREADS") or DEFAULT_WEB_THREADS)


class ApiTokenHandler(WSGIHandler):
    """A WSGIHandler whose middleware chain is settings.API_MIDDLEWARE.

    Built as BaseHandler.load_middleware builds settings.MIDDLEWARE's chain, for a
    synchronous handler and synchronous middleware (all this list holds), from the list
    itself: no global setting is swapped while it is built."""

    def load_middleware(self, is_async=False):
        # BaseHandler's private attributes, which django-stubs does not declare.
        self._view_middleware: list[Callable] = []
        self._template_response_middleware: list[Callable] = []
        self._exception_middleware: list[Callable] = []
        handler = convert_exception_to_response(self._get_response)  # type: ignore[attr-defined]
        for path in reversed(settings.API_MIDDLEWARE):
            factory = import_string(path)
            if not getattr(factory, "sync_capable", True):
                raise ImproperlyConfigured(f"API_MIDDLEWARE holds synchronous middleware only, not {path}")
            try:
                instance = factory(handler)
            except MiddlewareNotUsed:
                continue
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(0, instance.process_view)
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(instance.process_template_response)
            if hasattr(instance, "process_exception"):
                self._exception_middleware.append(instance.process_exception)
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler


def is_token_api_request(path: str, authorization: str) -> bool:
    """A call to /api/ with an API token (``Authorization: Token …``)."""
    return path.startswith("/api/") and authorization[:6].lower() == "token "


class StackDispatcher:
    def __init__(self):
        self.site = WSGIHandler()
        self.api = ApiTokenHandler()

    def __call__(self, environ, start_response):
        token_api = is_token_api_request(environ.get("PATH_INFO", ""), environ.get("HTTP_AUTHORIZATION", ""))
        handler = self.api if token_api else self.site
        return handler(environ, start_response)


class TokenApiFastPath:
    """ASGI: a token-authenticated API call goes straight to the API handler on the
    thread pool; every other request (and an API call whose body is over
    FAST_PATH_MAX_BODY) to ``app``."""

    def __init__(self, app, api: BaseHandler, executor):
        self.app = app
        self.api = api
        self.executor = executor

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not is_token_api_request(scope["path"], _authorization(scope)):
            return await self.app(scope, receive, send)
        body, complete = await _body_read(receive, FAST_PATH_MAX_BODY)
        if body is None:
            return  # the client went away
        if not complete:
            return await self.app(scope, _replayed(body, receive), send)
        request = ASGIRequest(scope, io.BytesIO(body))
        loop = asyncio.get_running_loop()
        status, headers, content = await loop.run_in_executor(self.executor, self._respond, request)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def _respond(self, request: ASGIRequest) -> tuple[int, list, bytes]:
        """On a pool thread, what WSGIHandler does around get_response: the script prefix,
        request_started, and the response closed here (request_finished: this thread's
        database connection is closed if it must be)."""
        set_script_prefix(request.script_name)  # type: ignore[arg-type]  # a str: ASGIRequest sets it from the scope
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        response = self.api.get_response(request)
        response._handler_class = self.__class__  # type: ignore[attr-defined]  # as WSGIHandler does (private)
        try:
            content = b"".join(response)
        finally:
            response.close()
        headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
        headers += [(b"Set-Cookie", c.output(header="").encode("ascii").strip()) for c in response.cookies.values()]
        return response.status_code, headers, content


def _authorization(scope) -> str:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin1")
    return ""


async def _body_read(receive, limit: int) -> tuple[bytes | None, bool]:
    """The request body, up to ``limit`` bytes: (body, complete), or (None, False) when
    the client disconnected."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None, False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > limit:
            return b"".join(chunks), False


def _replayed(body: bytes, receive):
    """A receive that hands the app what was read already, then the rest."""
    replayed = False

    async def replay():
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": True}

    return replay


def get_application() -> StackDispatcher:
    """The WSGI application (``config.wsgi``): for WSGI servers and in-process tests."""
    django.setup(set_prefix=False)
    return StackDispatcher()


def get_asgi_application() -> EarlyAnswers:
    """The application gunicorn's uvicorn workers serve (``config.asgi``): the early
    answers in front (config/front.py), then the API's fast path, then both stacks."""
    from a2wsgi import WSGIMiddleware

    stacks = get_application()
    from config.front import EarlyAnswers  # imports the models: after django.setup

    everything = WSGIMiddleware(stacks, workers=web_threads())
    return EarlyAnswers(TokenApiFastPath(everything, stacks.api, everything.executor), everything.executor)
