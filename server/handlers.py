"""Django behind the server: one URLconf, two middleware chains.

A request to the JSON API that authenticates with ``Authorization: Token …`` uses none of
what a browser's request needs: no session, CSRF (DRF exempts token requests), auth
middleware (DRF authenticates), locale, messages, static files, login throttling (axes
guards the login views) or CSP and frame headers (JSON is neither rendered nor framed). In
a flash sale that is nearly every request, so it runs through the short
``settings.API_MIDDLEWARE``; everything else through ``settings.MIDDLEWARE``. Same URLconf,
same views: only the chain around them differs (``StackDispatcher``, a WSGI application).
The short chain's gain is measured in docs/DESIGN-NOTES.md ("Two middleware chains"); it
builds its chain as Django's own ``BaseHandler.load_middleware`` does, which reaches into
BaseHandler's private attributes: tests/server/test_pinned_internals.py fails when the
pinned Django changes them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import django
from django.conf import settings
from django.core import signals
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest
from django.urls import set_script_prefix
from django.utils.module_loading import import_string

# Threads per process for the synchronous views: as many requests as one process has in
# flight while others wait on Redis or PostgreSQL (and as many database connections).
DEFAULT_WEB_THREADS = 16


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

    def answer(self, request: HttpRequest) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """A request already read (the server read its body on the event loop) through this
        chain, on the calling thread: what WSGIHandler does around get_response — the
        script prefix, ``request_started``, and the response closed here
        (``request_finished``: this thread's database connection is closed if it must
        be). An API answer is JSON of a few hundred bytes: its body is joined."""
        set_script_prefix(request.META.get("SCRIPT_NAME", "") or "/")
        signals.request_started.send(sender=self.__class__, environ=request.META)
        response = self.get_response(request)
        try:
            content = b"".join(response)
        finally:
            response.close()
        headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
        headers += [(b"Set-Cookie", c.output(header="").encode("ascii").strip()) for c in response.cookies.values()]
        return response.status_code, headers, content


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


def get_application() -> StackDispatcher:
    """The WSGI application (``config.wsgi``; the server's, behind ``server.app``)."""
    django.setup(set_prefix=False)
    return StackDispatcher()
