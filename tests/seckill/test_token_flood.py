"""Made-up API tokens are cheap (the token filter, the refused-token cache and the
failed-authentication limit of seckill/authentication.py), a real token is never refused
by the filter, and the cache Redis can neither name a user nor run code (authenticated
token entries, JSON sessions)."""

import json
import secrets
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from seckill.purchase.authentication import token_cache_clear
from seckill.purchase.token_cache import token_shared_key
from seckill.sale.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import cache_redis, stock_redis

from ..factories import make_activity, make_users, token_of
from ..helpers import BASE_DIR, gate_window_room, subprocess_env

pytestmark = pytest.mark.django_db


def _client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _buy(key: str, activity, token: str):
    return _client(key).post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json")


def _made_up() -> str:
    return secrets.token_hex(20)


def _fill() -> None:
    call_command("token_cache_fill", stdout=open("/dev/null", "w"), stderr=open("/dev/null", "w"))


@override_settings(SECKILL_AUTH_FAILURES_PER_IP="off")
def test_a_flood_of_made_up_tokens_costs_well_under_one_query_per_request():
    users = make_users(3, prefix="flood")
    _fill()
    activity = make_activity(stock=10)
    token = activity_token_ensure(activity_id=activity.pk)
    assert _buy(token_of(users[0]), activity, token).status_code == 202  # the activity is cached here now
    flood = 500
    with CaptureQueriesContext(connection) as queries:
        for i in range(flood):
            key = _made_up()
            if i % 3 == 0:
                response = _buy(key, activity, token)
            elif i % 3 == 1:
                response = _client(key).get(f"/api/activities/{activity.pk}/result")
            else:
                response = _client(key).get("/api/orders/")
            assert response.status_code == 401, response.content
            assert response.json()["code"] == "authentication_failed"
    # The activity's own copy is re-read when this process's copy expires (a second): not
    # the tokens' doing, and not what is measured here.
    spent = [q["sql"] for q in queries.captured_queries if '"seckill_activity"' not in q["sql"]]
    assert len(spent) < 0.1 * flood, spent[:5]
    # The real tokens still work, in a process that has not met them.
    token_cache_clear()
    assert _buy(token_of(users[1]), activity, token).status_code == 202
    assert _client(token_of(users[2])).get(f"/api/activities/{activity.pk}/result").status_code == 200


@override_settings(SECKILL_AUTH_FAILURES_PER_IP="off", SECKILL_TOKEN_REFUSED_TTL=600.0)
def test_a_made_up_token_repeated_costs_one_lookup_even_without_the_filter():
    """No filter built (the cache Redis was emptied): the first try reads the database,
    the repeats are answered by the refused-token cache, in every process."""
    activity = make_activity(stock=1)
    key = _made_up()
    with CaptureQueriesContext(connection) as queries:
        for _ in range(50):
            token_cache_clear()  # another web process each time
            assert _client(key).get(f"/api/activities/{activity.pk}/result").status_code == 401
    assert len([q for q in queries.captured_queries if "authtoken_token" in q["sql"]]) == 1


@override_settings(SECKILL_AUTH_FAILURES_PER_IP="5/h")
def test_failed_authentications_of_an_address_are_rate_limited_and_a_real_token_still_works():
    (user,) = make_users(1, prefix="failures")
    _fill()
    activity = make_activity(stock=5)
    token = activity_token_ensure(activity_id=activity.pk)
    gate_window_room(3600)  # the count must not start again mid-test
    answers = [_buy(_made_up(), activity, token) for _ in range(5)]
    assert [a.status_code for a in answers] == [401] * 5
    for response in (_buy(_made_up(), activity, token), _client(_made_up()).get("/api/orders/")):
        assert response.status_code == 429, response.content
        assert response.json()["code"] == "rate_limited"
        assert int(response["Retry-After"]) >= 1
    # Another address is not limited; a real token from the limited one is served.
    other = _client(_made_up()).get("/api/orders/", REMOTE_ADDR="10.1.2.3")
    assert other.status_code == 401
    token_cache_clear()
    assert _buy(token_of(user), activity, token).status_code == 202


def test_every_real_token_passes_the_filter_after_a_fill_and_right_after_creation_elsewhere(
    django_capture_on_commit_callbacks, transactional_db
):
    users = make_users(200, prefix="nofalse")  # bulk-created: in the filter only through the fill
    _fill()
    activity = make_activity(stock=1)
    for user in users:
        token_cache_clear()
        assert _client(token_of(user)).get(f"/api/activities/{activity.pk}/result").status_code == 200
    # Created in another process after the fill: its signal puts it in the filter.
    script = (
        "import django; django.setup()\n"
        "from django.contrib.auth import get_user_model\n"
        "from rest_framework.authtoken.models import Token\n"
        "user = get_user_model().objects.create(username='elsewhere')\n"
        "print(Token.objects.create(user=user).key)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=BASE_DIR, env=subprocess_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip().splitlines()[-1]
    token_cache_clear()
    cache_redis().delete(token_shared_key(key))  # the filter alone decides: no shared entry to find
    assert _client(key).get(f"/api/activities/{activity.pk}/result").status_code == 200
    # And one created here, after a fill.
    user = get_user_model().objects.create(username="here")
    with django_capture_on_commit_callbacks(execute=True):
        created = Token.objects.create(user=user)
    token_cache_clear()
    cache_redis().delete(token_shared_key(created.key))
    assert _client(created.key).get(f"/api/activities/{activity.pk}/result").status_code == 200


# --- the cache Redis cannot name a user ------------------------------------------------


def test_a_forged_token_cache_entry_logs_nobody_in():
    victim, shopper = make_users(2, prefix="forged")
    _fill()
    activity = make_activity(stock=5)
    token = activity_token_ensure(activity_id=activity.pk)
    made_up = _made_up()
    # Someone with write access to the cache Redis names the victim for a made-up token,
    # in the entry's plain form and with a made-up signature.
    for entry in (f"{victim.pk}:{victim.username}", f"{victim.pk}:{victim.username}:{'0' * 32}"):
        cache_redis().set(token_shared_key(made_up), entry)
        token_cache_clear()
        assert _buy(made_up, activity, token).status_code == 401
        token_cache_clear()
        assert _client(made_up).get(f"/api/activities/{activity.pk}/result").status_code == 401
    # ... or points a real shopper's token at the victim: the shopper stays the shopper.
    cache_redis().set(token_shared_key(token_of(shopper)), f"{victim.pk}:{victim.username}")
    token_cache_clear()
    assert _buy(token_of(shopper), activity, token).status_code == 202
    assert stock_redis().hkeys(ActivityKeys(activity.pk).users) == [str(shopper.pk).encode()]


def test_sessions_are_stored_as_json_not_pickle():
    (user,) = make_users(1, prefix="jsonsession")
    client = APIClient()
    client.force_login(user)
    activity = make_activity(stock=1)
    assert client.get(f"/api/activities/{activity.pk}/result").status_code == 200
    names = cache_redis().keys("*sessions*")
    assert names, cache_redis().keys("*")
    for name in names:
        stored = json.loads(cache_redis().get(name))  # pickle would not parse
        assert stored["_auth_user_id"] == str(user.pk)
