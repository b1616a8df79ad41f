"""config.asgi.application (server.app.Shop), what gunicorn's uvicorn workers serve: a
token-authenticated API call goes straight to the API chain (``ApiTokenHandler.answer``), a
purchase into the sale's one entry, everything else through the WSGI stacks on the thread
pool. Both give the same answers: the ASGI app only leaves out the WSGI adapter, never a
rule (the tests taking ``api_stack`` in test_api_stack.py run through both)."""

import json

import pytest

from seckill.sale.activities import activity_token_ensure
from server.app import PURCHASE_MAX_BODY
from server.handlers import StackDispatcher
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users, token_of
from ..helpers import asgi_call, wsgi_call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def application(asgi_application):
    """config.asgi.application (tests/seckill/conftest.py): ``.handed.calls`` counts what it
    hands to the WSGI stacks."""
    return asgi_application


def test_a_shopper_polling_for_the_result_takes_the_fast_path_too(application):
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="poll")
    before = application.handed.calls
    answer = asgi_call(
        application,
        "GET",
        f"/api/activities/{activity.pk}/result",
        headers={"Authorization": f"Token {token_of(user)}"},
    )
    assert answer["status"] == 200, answer
    assert json.loads(answer["body"])["code"] == "none"
    assert answer["headers"]["cache-control"] == ["no-store, max-age=0"]
    assert application.handed.calls == before


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


def test_a_purchase_body_is_read_whole_and_one_over_the_cap_is_refused(application):
    """A body in three parts is read whole before the purchase runs; one past
    PURCHASE_MAX_BODY is 413 ``payload_too_large`` and sells nothing."""
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="big")
    token = activity_token_ensure(activity_id=activity.pk)
    headers = {"Authorization": f"Token {token_of(user)}"}
    path = f"/api/activities/{activity.pk}/purchase"
    raw = json.dumps({"token": token, "quantity": 1}).encode()
    answer = asgi_call(application, "POST", path, headers=headers, chunks=[raw[:5], raw[5:9], raw[9:]])
    assert answer["status"] == 202, answer
    big = json.dumps({"token": token, "padding": "x" * (PURCHASE_MAX_BODY * 2)}).encode()
    third = len(big) // 3
    answer = asgi_call(
        application, "POST", path, headers=headers, chunks=[big[:third], big[third : 2 * third], big[2 * third :]]
    )
    assert answer["status"] == 413, answer
    assert json.loads(answer["body"])["code"] == "payload_too_large"
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 4


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
