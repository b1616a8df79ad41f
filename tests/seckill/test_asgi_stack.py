"""config.asgi.application, what gunicorn's uvicorn workers serve: a token-authenticated
API call goes straight to the API handler (config.handlers.TokenApiFastPath), everything
else through the WSGI stacks on the thread pool. Both give the same answers: the fast
path only leaves out the WSGI adapter, never a rule."""

import asyncio
import json

import pytest
from prometheus_client import REGISTRY

from config.handlers import FAST_PATH_MAX_BODY, StackDispatcher, get_asgi_application
from seckill.keys import ActivityKeys
from seckill.redis_client import stock_redis
from seckill.services import activity_token_ensure

from ..factories import make_activity, make_users, token_of
from .test_api_stack import call as wsgi_call

pytestmark = pytest.mark.django_db(transaction=True)


class Counted:
    """The ASGI app behind the fast path, counting the requests it is handed."""

    def __init__(self, app):
        self.app, self.calls = app, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.calls += 1
        return await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def application():
    app = get_asgi_application()
    app.app = Counted(app.app)
    yield app
    app.executor.shutdown(wait=True)


def asgi_call(app, method: str, path: str, *, headers=None, body=None, chunks=None, disconnect=False) -> dict:
    """One request through the ASGI app, in this process: status, headers, body."""
    raw = json.dumps(body).encode() if body is not None else b""
    parts = chunks if chunks is not None else [raw]
    size = sum(len(p) for p in parts)
    scope_headers = [(b"host", b"testserver"), (b"content-length", str(size).encode())]
    if body is not None or chunks is not None:
        scope_headers.append((b"content-type", b"application/json"))
    scope_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": scope_headers,
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    messages = [{"type": "http.disconnect"}] if disconnect else []
    if not disconnect:
        messages = [
            {"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)
        ]
    sent = []

    async def run():
        never = asyncio.Event()

        async def receive():
            if messages:
                return messages.pop(0)
            await never.wait()  # the client stays connected until the answer is sent

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(run())
    if not sent:
        return {"status": None, "headers": {}, "body": b""}
    start = sent[0]
    headers = {}
    for name, value in start["headers"]:
        headers.setdefault(name.decode().lower(), []).append(value.decode("latin1"))
    return {"status": start["status"], "headers": headers, "body": b"".join(m.get("body", b"") for m in sent[1:])}


def purchases_counted(code: str) -> float:
    return REGISTRY.get_sample_value("seckill_purchase_total", {"code": code}) or 0.0


def test_token_purchase_takes_the_fast_path_with_the_api_chain(application):
    activity = make_activity(stock=5, per_user_limit=3)
    (user,) = make_users(1, prefix="asgi")
    before_calls, before_queued = application.app.calls, purchases_counted("queued")
    answer = asgi_call(
        application,
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": f"Token {token_of(user)}", "X-Request-ID": "req-7"},
        body={"token": activity_token_ensure(activity_id=activity.pk), "quantity": 2},
    )
    assert answer["status"] == 202, answer
    assert json.loads(answer["body"])["code"] == "queued"
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 3
    assert application.app.calls == before_calls, "answered without the WSGI adapter"
    headers = answer["headers"]
    assert headers["x-request-id"] == ["req-7"]  # RequestIdMiddleware
    assert headers["x-content-type-options"] == ["nosniff"]  # SecurityMiddleware
    assert headers["content-type"] == ["application/json"]
    assert "set-cookie" not in headers and "content-security-policy" not in headers
    assert purchases_counted("queued") == before_queued + 1  # PurchaseOutcomeMiddleware


def test_a_shopper_polling_for_the_result_takes_the_fast_path_too(application):
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="poll")
    before = application.app.calls
    answer = asgi_call(
        application,
        "GET",
        f"/api/activities/{activity.pk}/result",
        headers={"Authorization": f"Token {token_of(user)}"},
    )
    assert answer["status"] == 200, answer
    assert json.loads(answer["body"])["code"] == "none"
    assert answer["headers"]["cache-control"] == ["no-store, max-age=0"]
    assert application.app.calls == before


def test_every_other_request_goes_through_the_wsgi_stacks(application):
    before = application.app.calls
    ping = asgi_call(application, "GET", "/api/ping")
    assert (ping["status"], json.loads(ping["body"])) == (200, {"ok": True})
    assert "content-security-policy" in ping["headers"]  # the full chain
    activity = make_activity(stock=5)
    no_token = asgi_call(application, "POST", f"/api/activities/{activity.pk}/purchase", body={"token": "x"})
    assert no_token["status"] == 401 and json.loads(no_token["body"])["code"] == "not_authenticated"
    assert application.app.calls == before + 2
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_the_fast_path_answers_as_the_wsgi_stack_does(application):
    """Rejections from every gate, through both: same status, same JSON, same limits
    headers; and neither sells anything."""
    activity = make_activity(stock=1, per_user_limit=1)
    buyer, other = make_users(2, prefix="same")
    token = activity_token_ensure(activity_id=activity.pk)
    url = f"/api/activities/{activity.pk}/purchase"
    application_wsgi = StackDispatcher()
    first = wsgi_call(
        application_wsgi,
        "POST",
        url,
        headers={"Authorization": f"Token {token_of(buyer)}"},
        body={"token": token},
    )
    assert first["status"] == 202
    auth = {"Authorization": f"Token {token_of(other)}"}
    cases = [
        ("sold out", url, auth, {"token": token}),
        ("duplicate", url, {"Authorization": f"Token {token_of(buyer)}"}, {"token": token}),
        ("bad purchase token", url, auth, {"token": "nope"}),
        ("unknown field", url, auth, {"token": token, "coupon": 1}),
        ("bad quantity", url, auth, {"token": token, "quantity": 2}),
        ("not an object", url, auth, [1, 2]),
        ("bad api token", url, {"Authorization": "Token not-a-key"}, {"token": token}),
        ("unknown activity", "/api/activities/999999/purchase", auth, {"token": token}),
    ]
    for name, path, headers, body in cases:
        fast = asgi_call(application, "POST", path, headers=headers, body=body)
        wsgi = wsgi_call(application_wsgi, "POST", path, headers=headers, body=body)
        assert fast["status"] == wsgi["status"] and 400 <= fast["status"] < 500, (name, fast, wsgi)
        assert json.loads(fast["body"]) == json.loads(wsgi["body"]), name
        assert fast["headers"].get("retry-after") == wsgi["headers"].get("retry-after"), name
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 0  # the one buyer's unit, no more


def test_a_body_over_the_fast_paths_limit_reaches_django_whole(application):
    """Read in three parts, past FAST_PATH_MAX_BODY: the WSGI stack gets every byte
    (replayed) and answers the unknown field, not a truncated body."""
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="big")
    raw = json.dumps({"token": "t", "padding": "x" * (FAST_PATH_MAX_BODY * 2)}).encode()
    third = len(raw) // 3
    before = application.app.calls
    answer = asgi_call(
        application,
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": f"Token {token_of(user)}"},
        chunks=[raw[:third], raw[third : 2 * third], raw[2 * third :]],
    )
    assert answer["status"] == 400, answer
    assert json.loads(answer["body"]) == {"code": "invalid_request", "detail": "Unknown field(s): padding."}
    assert application.app.calls == before + 1
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5


def test_a_client_gone_before_its_body_gets_no_answer_and_buys_nothing(application):
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="gone")
    answer = asgi_call(
        application,
        "POST",
        f"/api/activities/{activity.pk}/purchase",
        headers={"Authorization": f"Token {token_of(user)}"},
        disconnect=True,
    )
    assert answer["status"] is None
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 5
