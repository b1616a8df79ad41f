"""The purchase's token lookup and its rate limits in one call to the cache Redis
(stock/lua/shopper_gate.lua), in the order API.md gives its answers."""

import pytest
import redis
from django.core import checks
from django.test import override_settings
from rest_framework.test import APIClient

from seckill.apps import rates_check
from seckill.purchase.authentication import token_cache_clear
from seckill.purchase.token_cache import SHARED_PREFIX, token_shared_fill
from seckill.sale.activities import activity_token_ensure
from seckill.traffic import rate_parse
from stock.keys import ActivityKeys
from stock.redis_client import cache_redis, stock_redis

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db


def _buy(key: str, activity, body: dict):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.post(f"/api/activities/{activity.pk}/purchase", body, format="json")


@pytest.fixture
def redis_calls(monkeypatch):
    """Every command the code under test sends (pipelines aside), by name, in order."""
    sent = []
    original = redis.Redis.execute_command

    def spy(self, *args, **kwargs):
        sent.append(str(args[0]).upper())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "execute_command", spy)
    return sent


@override_settings(SECKILL_RATE_PER_USER="3/h")
def test_a_shopper_new_to_the_process_buys_in_two_redis_calls(redis_calls):
    activity = make_activity(stock=50)
    users = make_users(21, prefix="gate")
    token_shared_fill()  # the pre-sale step: every token in the shared cache
    token = activity_token_ensure(activity_id=activity.pk)
    stock_redis().set(ActivityKeys(activity.pk).drain, 1, px=600_000)  # a drain task at work: no kick
    assert _buy(token_of(users[0]), activity, {"token": token}).status_code == 202  # activity now cached here
    keys = [token_of(u) for u in users[1:]]

    redis_calls.clear()
    for key in keys:
        token_cache_clear()  # this process has not met the shopper
        assert _buy(key, activity, {"token": token}).status_code == 202
    # One gate call (token lookup + rate-limit count) and one stock script call each.
    assert redis_calls == ["EVALSHA", "EVALSHA"] * len(keys), redis_calls
    assert stock_redis().hlen(ActivityKeys(activity.pk).users) == 21


@override_settings(SECKILL_RATE_PER_USER="3/h")
def test_a_token_missing_from_the_shared_cache_is_read_there_once(redis_calls):
    """The gate script found no entry: the database answers, the entry is written (a
    pipeline), the limits are counted; the shared cache is not read a second time."""
    activity = make_activity(stock=5)
    users = make_users(2, prefix="notshared")  # bulk-created: not in the shared cache
    token = activity_token_ensure(activity_id=activity.pk)
    stock_redis().set(ActivityKeys(activity.pk).drain, 1, px=600_000)  # no drain kick
    assert _buy(token_of(users[0]), activity, {"token": token}).status_code == 202  # activity cached here
    key = token_of(users[1])
    token_cache_clear()
    redis_calls.clear()
    assert _buy(key, activity, {"token": token}).status_code == 202
    # Gate (lookup: miss), gate (count), stock script.
    assert redis_calls == ["EVALSHA", "EVALSHA", "EVALSHA"], redis_calls
    assert cache_redis().keys(f"{SHARED_PREFIX}*")  # written for the next process


@override_settings(SECKILL_RATE_PER_USER="2/h")
def test_requests_refused_before_the_limits_are_not_counted_and_the_limit_still_holds():
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="uncounted")
    key, token = token_of(user), activity_token_ensure(activity_id=activity.pk)
    for body in ({"token": token, "quantity": 0}, {"token": token, "quantity": "1"}, {"quantity": 1}):
        assert _buy(key, activity, body).status_code == 400
    for _ in range(3):
        assert _buy(key, activity, {"token": "not-the-token"}).json()["code"] == "bad_token"
    # None of the six counted: the shopper still has both requests of the window.
    answers = [_buy(key, activity, {"token": token}) for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 409, 429]
    assert answers[2].json()["code"] == "rate_limited" and int(answers[2]["Retry-After"]) >= 1
    assert stock_redis().get(ActivityKeys(activity.pk).stock) == b"4"


@override_settings(SECKILL_RATE_PER_USER="2/h")
def test_an_unknown_token_is_401_before_anything_else_and_counts_nothing():
    activity = make_activity(stock=5)
    response = _buy("f" * 40, activity, {"token": "x", "quantity": 0})  # bad body and bad token too
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert cache_redis().keys("seckill:rl:*") == []
    assert stock_redis().get(ActivityKeys(activity.pk).stock) == b"5"


def test_rates_parse_and_a_bad_setting_stops_the_start_up():
    assert rate_parse("10/s") == (10, 1)
    assert rate_parse("600/m") == (600, 60)
    assert rate_parse("100/5m") == (100, 300)
    assert rate_parse("1/d") == (1, 86400)
    assert rate_parse("off") is None and rate_parse("") is None
    with override_settings(SECKILL_RATE_PER_USER="10/x", SECKILL_RATE_PER_IP="100/5m"):
        errors = rates_check()
    assert [e.id for e in errors] == ["seckill.E001"]
    assert "SECKILL_RATE_PER_USER='10/x'" in errors[0].msg
    assert errors[0].level == checks.ERROR
    with override_settings(SECKILL_RATE_PER_USER="off", SECKILL_RATE_PER_IP="5/s"):
        assert rates_check() == []
    with override_settings(SECKILL_AUTH_FAILURES_PER_IP="30 per minute"):
        errors = rates_check()
    assert [e.id for e in errors] == ["seckill.E001"] and "SECKILL_AUTH_FAILURES_PER_IP" in errors[0].msg


def test_right_after_the_start_an_unknown_token_does_not_make_the_purchase_token():
    """The start task makes the purchase token; if it has not yet, the first purchase does,
    but only once its own API token is known to be good."""
    from seckill.models import Activity

    activity = make_activity(stock=5)  # live, warmed, no purchase token yet
    assert not Activity.objects.get(pk=activity.pk).purchase_token
    assert _buy("f" * 40, activity, {"token": "anything"}).status_code == 401
    assert not Activity.objects.get(pk=activity.pk).purchase_token
    (user,) = make_users(1, prefix="first")
    response = _buy(token_of(user), activity, {"token": "anything"})
    assert response.json()["code"] == "bad_token"  # the token exists now, and it is not "anything"
    assert Activity.objects.get(pk=activity.pk).purchase_token
