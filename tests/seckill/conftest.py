"""Fixtures of the seckill tests: the merchant's admin client, and the project's two
in-process applications (server.handlers, server.app): the WSGI stacks and the ASGI app
gunicorn's uvicorn workers serve, with ``api_stack`` running a test through each."""

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ..helpers import asgi_call, wsgi_call


@pytest.fixture
def merchant(db) -> Client:
    user = get_user_model().objects.create_superuser("merchant", "m@example.com", "pw-merchant")
    client = Client()
    client.force_login(user)
    return client


@dataclass
class ApiStack:
    """One way into the project, in this process: ``call`` makes one request (answers as
    tests.helpers.wsgi_call)."""

    name: str
    app: object
    fast_path: bool  # the ASGI app: token-authenticated API calls skip the WSGI adapter

    def call(self, method: str, path: str, **kwargs) -> dict:
        return (asgi_call if self.fast_path else wsgi_call)(self.app, method, path, **kwargs)

    def handed_to_wsgi(self) -> int | None:
        """The ASGI app: how many requests it has handed to the WSGI stacks so far."""
        return self.app.handed.calls if self.fast_path else None


@pytest.fixture(params=["wsgi", "asgi"])
def api_stack(request) -> ApiStack:
    """The test runs twice: through the WSGI stacks ("wsgi") and through the ASGI app
    ("asgi"); both must give the same answers."""
    if request.param == "wsgi":
        return ApiStack("wsgi", request.getfixturevalue("wsgi_application"), fast_path=False)
    return ApiStack("asgi", request.getfixturevalue("asgi_application"), fast_path=True)
