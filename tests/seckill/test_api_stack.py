"""The WSGI stacks behind config.asgi (server.handlers.StackDispatcher): token-authenticated
API calls take the short API_MIDDLEWARE chain, everything else the full one, and both
answer the same. The tests taking ``api_stack`` run through the WSGI stacks ("wsgi") and
through config.asgi.application ("asgi", whose fast path only leaves out the WSGI adapter);
what only the ASGI app does is in test_asgi_stack.py."""

import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from prometheus_client import REGISTRY

from seckill.sale.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db(transaction=True)


def purchases_counted(code: str) -> float:
    """The shop's count of one code: every sale's together."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "seckill_purchase"
        for sample in metric.samples
        if sample.name == "seckill_purchase_total" and sample.labels.get("code") == code
    )


def test_the_api_chain_only_leaves_middleware_out():
    assert set(settings.API_MIDDLEWARE) <= set(settings.MIDDLEWARE), "the API chain only leaves middleware out"


def test_token_purchase_takes_the_api_chain_and_is_sold(api_stack):
    """The short chain (WSGI) or the fast path with the API chain (ASGI, without the WSGI
    adapter): sold, with the API chain's headers and none of the full chain's."""
    activity = make_activity(stock=5, per_user_limit=3)
    (user,) = make_users(1, prefix="stack")
    before_calls, before_queued = api_stack.handed_to_wsgi(), purchases_counted("queued")
    answer = api_stack.call(
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": f"Token {token_of(user)}", "X-Request-ID": "req-42"},
        body={"token": activity_token_ensure(activity_id=activity.pk), "quantity": 2},
    )
    assert answer["status"] == 202, answer
    assert json.loads(answer["body"])["code"] == "queued"
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 3
    if api_stack.fast_path:
        assert api_stack.handed_to_wsgi() == before_calls, "answered without the WSGI adapter"
    headers = answer["headers"]
    assert headers["x-request-id"] == ["req-42"]  # kept: request ids on every API answer (RequestIdMiddleware)
    assert headers["x-content-type-options"] == ["nosniff"]  # kept: SecurityMiddleware
    assert headers["content-type"] == ["application/json"]
    # Left out: no session or CSRF cookie, no CSP or Vary: Cookie on a JSON answer.
    assert "set-cookie" not in headers
    assert "content-security-policy" not in headers
    assert "cookie" not in ",".join(headers.get("vary", [])).lower()
    assert purchases_counted("queued") == before_queued + 1  # PurchaseOutcomeMiddleware


def test_requests_without_an_api_token_take_the_full_chain(api_stack):
    """The same endpoint without a token, and every other request: the full chain (the
    ASGI app hands them to the WSGI stacks)."""
    before = api_stack.handed_to_wsgi()
    ping = api_stack.call("GET", "/api/ping")
    assert (ping["status"], json.loads(ping["body"])) == (200, {"ok": True})
    assert "content-security-policy" in ping["headers"]  # the full chain
    activity = make_activity(stock=5)
    no_token = api_stack.call("POST", f"/api/activities/{activity.pk}/purchase", body={"token": "x"})
    assert no_token["status"] == 401
    assert json.loads(no_token["body"])["code"] == "not_authenticated"
    assert "content-security-policy" in no_token["headers"]  # the full chain's header
    if api_stack.fast_path:
        assert api_stack.handed_to_wsgi() == before + 2
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_session_purchase_still_needs_csrf(api_stack):
    """A browser (session cookie) goes through the full chain, CSRF included."""
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="sess")
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(pk=user.pk))
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    answer = api_stack.call(
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Cookie": cookie},
        body={"token": activity_token_ensure(activity_id=activity.pk)},
    )
    assert answer["status"] == 403, answer
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_a_bad_token_on_the_short_chain_is_a_clear_401(api_stack):
    activity = make_activity(stock=5)
    answer = api_stack.call(
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": "Token not-a-real-key"},
        body={"token": activity_token_ensure(activity_id=activity.pk)},
    )
    assert answer["status"] == 401
    assert json.loads(answer["body"])["code"] in {"authentication_failed", "not_authenticated"}
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_expected_rejections_write_no_log_line_other_errors_do(api_stack, caplog):
    """A flood's 410s are counted by /metrics, not logged one by one; a 400 still is."""
    activity = make_activity(stock=1)
    first, second = make_users(2, prefix="logq")
    token = activity_token_ensure(activity_id=activity.pk)
    url = f"/api/activities/{activity.pk}/purchase"
    assert (
        api_stack.call("POST", url, headers={"Authorization": f"Token {token_of(first)}"}, body={"token": token})[
            "status"
        ]
        == 202
    )
    with caplog.at_level("WARNING", logger="django.request"):
        sold_out = api_stack.call(
            "POST", url, headers={"Authorization": f"Token {token_of(second)}"}, body={"token": token}
        )
        invalid = api_stack.call("POST", url, headers={"Authorization": f"Token {token_of(second)}"}, body={"token": 5})
    assert (sold_out["status"], invalid["status"]) == (410, 400)
    logged = [getattr(r, "status_code", None) for r in caplog.records if r.name == "django.request"]
    assert logged == [400]
