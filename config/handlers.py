"""Two middleware stacks behind one WSGI application (``config.wsgi.application``).

A request to the JSON API that authenticates with ``Authorization: Token …`` uses none
of what a browser's request needs: no session, CSRF (DRF exempts token requests), auth
middleware (DRF authenticates), locale, messages, static files, login throttling (axes
guards the login views) or CSP and frame headers (JSON is neither rendered nor framed).
In a flash sale that is nearly every request, so it runs through the short
``API_MIDDLEWARE``; everything else through ``MIDDLEWARE``. Same URLconf, same views:
only the stack around them differs. See docs/BENCHMARKS.md for what it saves.
"""

from __future__ import annotations

import django
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler


class ApiTokenHandler(WSGIHandler):
    """A WSGIHandler whose middleware chain is settings.API_MIDDLEWARE."""

    def load_middleware(self, is_async=False):
        # BaseHandler reads settings.MIDDLEWARE; swap the list in for the one-off build,
        # at start-up, before any request is served.
        site = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = site


def is_token_api_request(environ: dict) -> bool:
    return (
        environ.get("PATH_INFO", "").startswith("/api/")
        and environ.get("HTTP_AUTHORIZATION", "")[:6].lower() == "token "
    )


class StackDispatcher:
    def __init__(self):
        self.site = WSGIHandler()
        self.api = ApiTokenHandler()

    def __call__(self, environ, start_response):
        handler = self.api if is_token_api_request(environ) else self.site
        return handler(environ, start_response)


def get_application() -> StackDispatcher:
    django.setup(set_prefix=False)
    return StackDispatcher()
