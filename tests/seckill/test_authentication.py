"""The cached authentication of the JSON API (seckill/authentication.py), the bare ping
view the benchmarks measure against, and the bench-only endpoint staying unmounted."""

import pytest
from django.contrib.auth import get_user_model
from django.middleware.csrf import _get_new_csrf_string, _mask_cipher_secret
from django.test import override_settings
from rest_framework.test import APIClient

from seckill.keys import ActivityKeys
from seckill.redis_client import stock_redis
from seckill.services import activity_token_ensure

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
