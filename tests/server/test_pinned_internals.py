"""The server reaches into two libraries where they offer no public way (docs/DESIGN-NOTES.md,
"What the server keeps of its own"): Django's BaseHandler, to build the API's short
middleware chain (server.handlers.ApiTokenHandler), and uvicorn's httptools protocol, for a
request head's deadline and size (server.worker.HttpToolsProtocol). These tests fail when a
new release of either changes what that code relies on, before the behaviour does."""

import inspect

import django
import uvicorn
from django.core.handlers.base import BaseHandler
from django.core.handlers.wsgi import WSGIHandler
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.handlers import ApiTokenHandler
from server.worker import HttpToolsProtocol as Guarded

# The releases these hooks were written and measured against (requirements.txt pins them).
DJANGO = (5, 2)
UVICORN = "0.54.0"


def test_django_is_the_release_the_api_chain_was_built_for():
    assert django.VERSION[:2] == DJANGO, "check ApiTokenHandler.load_middleware against BaseHandler.load_middleware"


def test_django_builds_its_chain_in_the_attributes_the_api_chain_sets():
    """ApiTokenHandler.load_middleware sets what BaseHandler.load_middleware sets."""
    site = WSGIHandler()
    api = ApiTokenHandler()
    private = {"_view_middleware", "_template_response_middleware", "_exception_middleware", "_middleware_chain"}
    assert private <= set(vars(site)), "BaseHandler.load_middleware no longer sets these"
    assert private <= set(vars(api))
    assert callable(BaseHandler._get_response)
    source = inspect.getsource(BaseHandler.load_middleware)
    for name in private | {"convert_exception_to_response", "_get_response"}:
        assert name in source, name


def test_uvicorn_is_the_release_the_head_guard_was_built_for():
    assert uvicorn.__version__ == UVICORN, "check server.worker.HttpToolsProtocol against uvicorn's protocol"


def test_uvicorns_protocol_has_the_hooks_the_head_guard_overrides():
    for hook in ("connection_made", "data_received", "on_headers_complete", "on_response_complete", "connection_lost"):
        assert hook in vars(HttpToolsProtocol), hook
        assert hook in vars(Guarded), hook
    init = inspect.getsource(HttpToolsProtocol.__init__)
    assert "self.loop" in init and "self.transport" in init
    # The keep-alive timer is set once a response is complete: the guard's idle phase.
    assert "timeout_keep_alive" in inspect.getsource(HttpToolsProtocol.on_response_complete)
