"""The WSGI stacks behind config.asgi (config.handlers.StackDispatcher): token-authenticated
API calls take the short API_MIDDLEWARE chain, everything else the full one, and both
answer the same."""

import io
import json
import sys

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from config.handlers import StackDispatcher
from seckill.keys import ActivityKeys
from seckill.redis_client import stock_redis
from seckill.services import activity_token_ensure

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def application():
    return StackDispatcher()


def call(app, method: str, path: str, *, headers: dict | None = None, body: dict | None = None):
    raw = json.dumps(body).encode() if body is not None else b""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "testserver",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(raw),
        "wsgi.errors": sys.stderr,
        "CONTENT_LENGTH": str(len(raw)),
        "CONTENT_TYPE": "application/json" if body is not None else "",
        **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in (headers or {}).items()},
    }
    answer = {}

    def start_response(status, response_headers, exc_info=None):
        answer["status"] = int(status.split()[0])
        answer["headers"] = {}
        for name, value in response_headers:
            answer["headers"].setdefault(name.lower(), []).append(value)

    chunks = app(environ, start_response)
    answer["body"] = b"".join(chunks)
    getattr(chunks, "close", lambda: None)()
    return answer


def test_the_api_chain_only_leaves_middleware_out():
    assert set(settings.API_MIDDLEWARE) <= set(settings.MIDDLEWARE), "the API chain only leaves middleware out"


def test_token_purchase_takes_the_short_chain_and_is_sold(application):
    activity = make_activity(stock=5, per_user_limit=3)
    (user,) = make_users(1, prefix="stack")
    answer = call(
        application,
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": f"Token {token_of(user)}", "X-Request-ID": "req-42"},
        body={"token": activity_token_ensure(activity_id=activity.pk), "quantity": 2},
    )
    assert answer["status"] == 202, answer
    assert json.loads(answer["body"])["code"] == "queued"
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 3
    headers = answer["headers"]
    assert headers["x-request-id"] == ["req-42"]  # kept: request ids on every API answer
    assert headers["x-content-type-options"] == ["nosniff"]  # kept: SecurityMiddleware
    # Left out: no session or CSRF cookie, no CSP or Vary: Cookie on a JSON answer.
    assert "set-cookie" not in headers
    assert "content-security-policy" not in headers
    assert "cookie" not in ",".join(headers.get("vary", [])).lower()


def test_the_same_endpoint_without_a_token_takes_the_full_chain(application):
    activity = make_activity(stock=5)
    answer = call(application, "POST", f"/api/activities/{activity.pk}/purchase", body={"token": "x"})
    assert answer["status"] == 401
    assert json.loads(answer["body"])["code"] == "not_authenticated"
    assert "content-security-policy" in answer["headers"]  # the full chain's header
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_session_purchase_still_needs_csrf(application):
    """A browser (session cookie) goes through the full chain, CSRF included."""
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="sess")
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(pk=user.pk))
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    answer = call(
        application,
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Cookie": cookie},
        body={"token": activity_token_ensure(activity_id=activity.pk)},
    )
    assert answer["status"] == 403, answer
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_a_bad_token_on_the_short_chain_is_a_clear_401(application):
    activity = make_activity(stock=5)
    answer = call(
        application,
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": "Token not-a-real-key"},
        body={"token": activity_token_ensure(activity_id=activity.pk)},
    )
    assert answer["status"] == 401
    assert json.loads(answer["body"])["code"] in {"authentication_failed", "not_authenticated"}
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_expected_rejections_write_no_log_line_other_errors_do(application, caplog):
    """A flood's 410s are counted by /metrics, not logged one by one; a 400 still is."""
    activity = make_activity(stock=1)
    first, second = make_users(2, prefix="logq")
    token = activity_token_ensure(activity_id=activity.pk)
    url = f"/api/activities/{activity.pk}/purchase"
    assert (
        call(application, "POST", url, headers={"Authorization": f"Token {token_of(first)}"}, body={"token": token})[
            "status"
        ]
        == 202
    )
    with caplog.at_level("WARNING", logger="django.request"):
        sold_out = call(
            application, "POST", url, headers={"Authorization": f"Token {token_of(second)}"}, body={"token": token}
        )
        invalid = call(
            application, "POST", url, headers={"Authorization": f"Token {token_of(second)}"}, body={"token": 5}
        )
    assert (sold_out["status"], invalid["status"]) == (410, 400)
    logged = [getattr(r, "status_code", None) for r in caplog.records if r.name == "django.request"]
    assert logged == [400]
