"""The cached authentication of the JSON API (seckill/authentication.py), the bare ping
view the benchmarks measure against, and the bench-only endpoint staying unmounted."""

import gc
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.middleware.csrf import _get_new_csrf_string, _mask_cipher_secret
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.test import APIClient

from seckill.purchase.authentication import token_cache_clear, token_known, token_shopper
from seckill.purchase.token_cache import SHARED_PREFIX
from seckill.sale.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import cache_redis, stock_redis

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db


def test_ping_is_a_bare_json_answer_and_get_only():
    client = APIClient()
    response = client.get("/api/ping")
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    assert client.post("/api/ping").status_code == 405


def test_bench_endpoint_is_not_mounted_by_default():
    (user,) = make_users(1, prefix="nobench")
    activity = make_activity(stock=3)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    response = client.post(f"/api/bench/activities/{activity.pk}/purchase-db", {"token": "x"}, format="json")
    assert response.status_code == 404
    assert stock_redis().get(ActivityKeys(activity.pk).stock) == b"3"


def test_session_purchase_with_csrf_is_served_and_the_user_is_remembered(django_assert_max_num_queries):
    activity = make_activity(stock=5)
    (first, second) = make_users(2, prefix="session")
    token = activity_token_ensure(activity_id=activity.pk)
    for user in (first, second):
        client = APIClient(enforce_csrf_checks=True)
        client.force_login(user)
        csrf = _mask_cipher_secret(_get_new_csrf_string())
        client.cookies["csrftoken"] = csrf
        url = f"/api/activities/{activity.pk}/result"
        assert client.get(url).json()["code"] == "none"
        # The second request of the same session finds its user in the process cache:
        # no auth_user query (the result endpoint itself reads orders).
        with django_assert_max_num_queries(3) as queries:
            assert client.get(url).status_code == 200
        assert not [q for q in queries.captured_queries if '"auth_user"' in q["sql"]]
        response = client.post(
            f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json", HTTP_X_CSRFTOKEN=csrf
        )
        assert response.status_code == 202, response.content
        # CSRF is still enforced for the cached user.
        refused = client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json")
        assert refused.status_code == 403
        assert refused.json()["code"] == "csrf_failed"
    keys = ActivityKeys(activity.pk)
    assert stock_redis().get(keys.stock) == b"3"
    assert stock_redis().hlen(keys.users) == 2
    assert stock_redis().xlen(keys.log) == 2


def test_a_new_session_after_a_password_change_is_verified_in_full():
    (user,) = make_users(1, prefix="rehash")
    old = APIClient()
    old.force_login(user)
    activity = make_activity(stock=1)
    assert old.get(f"/api/activities/{activity.pk}/result").status_code == 200
    user = get_user_model().objects.get(pk=user.pk)
    user.set_password("a-new-password-for-tests")
    user.save()
    new = APIClient()
    new.force_login(user)
    assert new.get(f"/api/activities/{activity.pk}/result").status_code == 200


@override_settings(SECKILL_TOKEN_CACHE_TTL=30.0)
def test_token_lookup_is_one_query_then_none(django_assert_max_num_queries):
    (user,) = make_users(1, prefix="tok")
    activity = make_activity(stock=1)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    url = f"/api/activities/{activity.pk}/result"
    client.get(url)
    with django_assert_max_num_queries(3) as queries:  # the endpoint's own reads, no token lookup
        assert client.get(url).status_code == 200
    assert not [q for q in queries.captured_queries if "authtoken_token" in q["sql"]]
    inactive = APIClient()
    (other,) = make_users(1, prefix="inactive")
    get_user_model().objects.filter(pk=other.pk).update(is_active=False)
    inactive.credentials(HTTP_AUTHORIZATION=f"Token {token_of(other)}")
    assert inactive.get(url).status_code == 401


# --- the shared token cache (cache Redis), for a process that has not seen the shopper ---


def _token_queries(queries) -> list:
    return [q for q in queries.captured_queries if "authtoken_token" in q["sql"]]


def _result_as(key: str, activity) -> int:
    token_cache_clear()  # a web process that has not seen this shopper yet
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get(f"/api/activities/{activity.pk}/result").status_code


def test_a_new_token_is_shared_at_creation_and_needs_no_query_in_another_process(
    django_assert_max_num_queries, django_capture_on_commit_callbacks
):
    user = get_user_model().objects.create(username="shared-new")
    with django_capture_on_commit_callbacks(execute=True):  # written after the commit
        token = Token.objects.create(user=user)
    activity = make_activity(stock=1)
    stored = cache_redis().keys(f"{SHARED_PREFIX}*")
    assert len(stored) == 1
    assert token.key.encode() not in stored[0]  # a digest of the credential, not the credential
    with django_assert_max_num_queries(3) as queries:
        assert _result_as(token.key, activity) == 200
    assert not _token_queries(queries)


def test_a_bulk_created_token_is_shared_after_its_first_lookup(django_assert_max_num_queries):
    (user,) = make_users(1, prefix="shared-bulk")  # bulk_create: no signal
    activity = make_activity(stock=1)
    key = token_of(user)
    with django_assert_max_num_queries(4) as queries:
        assert _result_as(key, activity) == 200
    assert len(_token_queries(queries)) == 1
    with django_assert_max_num_queries(3) as queries:
        assert _result_as(key, activity) == 200
    assert not _token_queries(queries)


def test_a_deleted_token_or_an_inactive_user_is_refused_at_once_despite_the_shared_cache(
    django_capture_on_commit_callbacks,
):
    users = make_users(2, prefix="shared-revoke")
    activity = make_activity(stock=1)
    keys = [token_of(u) for u in users]
    assert [_result_as(k, activity) for k in keys] == [200, 200]  # both now in the shared cache
    with django_capture_on_commit_callbacks(execute=True):
        Token.objects.filter(key=keys[0]).delete()
        users[1].is_active = False
        users[1].save()
    assert [_result_as(k, activity) for k in keys] == [401, 401]
    assert cache_redis().keys(f"{SHARED_PREFIX}*") == []


def test_the_shoppers_this_process_remembers_are_out_of_the_garbage_collectors_sight():
    """A flood leaves up to 100,000 shoppers in each web process's memory. Were each one an
    object the cyclic collector tracks, every full collection would walk them all: at 60,000
    its pauses were 20-50 ms, with every request of the event loop waiting (the purchases'
    p99, docs/BENCHMARKS.md)."""
    users = make_users(400, prefix="untracked")
    keys = dict(Token.objects.filter(user__in=users).values_list("user_id", "key"))
    warm = [keys[user.pk] for user in users[:10]]  # the statement prepared, the connections made
    assert [token_shopper(key).user_id for key in warm] == [user.pk for user in users[:10]]
    gc.collect()
    tracked_before = len(gc.get_objects())
    for user in users[10:]:
        token_shopper(keys[user.pk])
    assert all(token_known(keys[user.pk]).user_id == user.pk for user in users[10:])
    gc.collect()
    assert len(gc.get_objects()) - tracked_before < 39  # not one per shopper remembered


def test_token_cache_fill_shares_every_active_users_token_and_no_other(django_assert_max_num_queries):
    users = make_users(3, prefix="shared-fill")
    get_user_model().objects.filter(pk=users[2].pk).update(is_active=False)
    out, err = io.StringIO(), io.StringIO()
    call_command("token_cache_fill", stdout=out, stderr=err)
    assert out.getvalue().startswith("2 tokens cached")
    assert "2 tokens cached…" in err.getvalue()  # progress
    activity = make_activity(stock=1)
    for key in [token_of(user) for user in users[:2]]:
        with django_assert_max_num_queries(3) as queries:
            assert _result_as(key, activity) == 200
        assert not _token_queries(queries)
    assert _result_as(token_of(users[2]), activity) == 401


@pytest.mark.django_db(transaction=True)
def test_a_key_no_token_can_have_is_refused_without_a_query(django_assert_max_num_queries):
    """A key with a NUL (PostgreSQL refuses it in text) or longer than any token is refused
    without a lookup; the real token beside it is found."""
    (user,) = make_users(1, prefix="nul-key")
    key = token_of(user)
    with django_assert_max_num_queries(0):
        for candidate in ("bad\x00key", "y" * 41):
            with pytest.raises(AuthenticationFailed):
                token_shopper(candidate)
    assert token_shopper(key).user_id == user.pk
