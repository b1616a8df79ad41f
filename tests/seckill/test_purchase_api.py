"""The purchase endpoint and its neighbours (flag, result) as API.md describes them.

Every refusal is asserted together with the invariant that matters: the stock was not
touched (Redis stock, database stock, reservation log and participants all unchanged).
"""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from inventory.models import SeckillStock
from orders.models import AnomalyOrder, Order
from orders.services.creation import orders_create_from_reservations
from seckill.sale.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db


def stock_state(activity) -> tuple:
    """Everything a purchase could change: Redis stock, participants, log; DB stock."""
    keys, client = ActivityKeys(activity.pk), stock_redis()
    return (
        client.get(keys.stock),
        client.hlen(keys.users),
        client.xlen(keys.log),
        SeckillStock.objects.filter(activity_id=activity.pk).values_list("available", "version").first(),
        Order.objects.filter(activity_id=activity.pk).count(),
    )


def purchase_url(activity_id) -> str:
    return f"/api/activities/{activity_id}/purchase"


@pytest.fixture
def shopper():
    (user,) = make_users(1, prefix="api")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    client.user = user
    return client


def buy(client, activity, **body):
    return client.post(purchase_url(activity.pk), body, format="json")


def assert_error(response, status: int, code: str) -> None:
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == code, response.json()
    assert response.json()["detail"]


# --- the happy path -------------------------------------------------------------


def test_purchase_reserves_one_unit_and_logs_it(shopper):
    activity = make_activity(stock=3)
    token = activity_token_ensure(activity_id=activity.pk)
    response = buy(shopper, activity, token=token)
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["code"] == "queued" and body["remaining"] == 2 and body["reservation"]
    (entry,) = reservations_pending(activity_id=activity.pk)
    assert (entry.reservation_id, entry.user_id, entry.quantity) == (body["reservation"], shopper.user.pk, 1)
    # The second try is a duplicate and changes nothing.
    before = stock_state(activity)
    assert_error(buy(shopper, activity, token=token), 409, "duplicate")
    assert stock_state(activity) == before


def test_sold_out_is_410_and_takes_nothing(shopper):
    activity = make_activity(stock=1, per_user_limit=2)
    token = activity_token_ensure(activity_id=activity.pk)
    before = stock_state(activity)
    assert_error(buy(shopper, activity, token=token, quantity=2), 410, "sold_out")
    assert stock_state(activity) == before


# --- the time window and the token ---------------------------------------------------


@pytest.mark.parametrize("token_kind", ["random", "other_activity", "empty_looking", "long"])
def test_before_the_start_nothing_is_touched_whatever_the_token(shopper, token_kind):
    activity = make_activity(stock=5, started=False)  # warmed: stock is in Redis, ready to sell
    other = make_activity(stock=5)
    tokens = {
        "random": "x" * 32,
        "other_activity": activity_token_ensure(activity_id=other.pk),
        "empty_looking": " ",
        "long": "t" * 128,
    }
    assert activity_token_ensure(activity_id=activity.pk) is None  # no token exists before the start
    before = stock_state(activity)
    assert before[0] == b"5"
    assert_error(buy(shopper, activity, token=tokens[token_kind]), 403, "not_started")
    assert stock_state(activity) == before
    activity.refresh_from_db()
    assert activity.purchase_token is None


def test_after_the_end_is_ended(shopper):
    activity = make_activity(stock=5)
    token = activity_token_ensure(activity_id=activity.pk)
    type(activity).objects.filter(pk=activity.pk).update(end_at=timezone.now() - timedelta(seconds=1))
    before = stock_state(activity)
    assert_error(buy(shopper, activity, token=token), 403, "ended")
    assert stock_state(activity) == before


def test_wrong_token_and_another_activitys_token_are_bad_token(shopper):
    activity, other = make_activity(stock=5), make_activity(stock=5)
    activity_token_ensure(activity_id=activity.pk)
    other_token = activity_token_ensure(activity_id=other.pk)
    before = stock_state(activity)
    for token in ["wrong", other_token, "é-not-ascii"]:
        assert_error(buy(shopper, activity, token=token), 403, "bad_token")
    # A lone surrogate is valid JSON but no valid string to encode.
    raw = b'{"token": "\\ud800"}'
    response = shopper.generic("POST", purchase_url(activity.pk), raw, content_type="application/json")
    assert_error(response, 403, "bad_token")
    assert stock_state(activity) == before


def test_missing_stock_key_is_busy_never_sold_out(shopper):
    activity = make_activity(stock=5, warm=False)
    token = activity_token_ensure(activity_id=activity.pk)
    before = stock_state(activity)
    response = buy(shopper, activity, token=token)
    assert_error(response, 503, "busy")
    assert int(response["Retry-After"]) > 0
    assert stock_state(activity) == before
    # The same after the key vanished mid-sale (Redis restarted empty).
    warmed = make_activity(stock=5)
    stock_redis().delete(ActivityKeys(warmed.pk).stock)
    response = buy(shopper, warmed, token=activity_token_ensure(activity_id=warmed.pk))
    assert_error(response, 503, "busy")
    assert response["Retry-After"]


def test_moving_the_start_of_a_started_sale_into_the_future_is_refused(shopper):
    """A started sale's start is locked (seckill.sale.activities.activity_locked_fields): its token stays."""
    from seckill.sale.activities import ActivityChangeRefused, activity_save

    activity = make_activity(stock=5)
    token = activity_token_ensure(activity_id=activity.pk)
    activity.start_at = timezone.now() + timedelta(minutes=5)
    with pytest.raises(ActivityChangeRefused, match="cannot change once the stock is loaded or the sale has started"):
        activity_save(activity=activity)
    activity.refresh_from_db()
    assert activity.purchase_token == token and activity.start_at < timezone.now()


# --- the order of the checks (API.md) -----------------------------------------------


def test_unauthenticated_is_401_before_anything_else():
    activity = make_activity(stock=5)
    anonymous = APIClient()
    before = stock_state(activity)
    response = anonymous.post(purchase_url(activity.pk), {"quantity": "bad"}, format="json")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Token")
    assert_error(anonymous.post(purchase_url(999_999), {}, format="json"), 401, "not_authenticated")
    assert_error(anonymous.get(f"/api/activities/{activity.pk}/result"), 401, "not_authenticated")
    bad_key = APIClient()
    bad_key.credentials(HTTP_AUTHORIZATION="Token not-a-key")
    assert_error(bad_key.post(purchase_url(activity.pk), {}, format="json"), 401, "authentication_failed")
    assert stock_state(activity) == before


def test_session_without_csrf_is_403():
    activity = make_activity(stock=5)
    (user,) = make_users(1, prefix="csrf")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    before = stock_state(activity)
    token = activity_token_ensure(activity_id=activity.pk)
    assert_error(client.post(purchase_url(activity.pk), {"token": token}, format="json"), 403, "csrf_failed")
    assert stock_state(activity) == before


def test_404_comes_before_400(shopper):
    assert_error(shopper.post(purchase_url(999_999), {"quantity": -1}, format="json"), 404, "not_found")
    response = shopper.post(purchase_url(999_999), data="nonsense", content_type="text/plain")
    assert_error(response, 404, "not_found")


def test_400_comes_before_the_time_window(shopper):
    activity = make_activity(stock=5, started=False)
    assert_error(buy(shopper, activity, quantity=1), 400, "invalid_request")  # token missing
    assert_error(buy(shopper, activity, token="x", quantity=0), 400, "invalid_request")


def test_time_window_comes_before_the_token(shopper):
    activity = make_activity(stock=5, started=False)
    assert_error(buy(shopper, activity, token="wrong"), 403, "not_started")
    ended = make_activity(stock=5)
    activity_token_ensure(activity_id=ended.pk)
    type(ended).objects.filter(pk=ended.pk).update(end_at=timezone.now() - timedelta(seconds=1))
    assert_error(buy(shopper, ended, token="wrong"), 403, "ended")


def test_token_comes_before_redis(shopper):
    activity = make_activity(stock=5, warm=False)  # Redis would answer busy
    activity_token_ensure(activity_id=activity.pk)
    assert_error(buy(shopper, activity, token="wrong"), 403, "bad_token")


# --- bad input: a 4xx with a JSON code, never a 500, never a side effect -------------------

_TOKEN = object()  # replaced by the activity's real token

BAD_BODIES = {
    "quantity_negative": {"token": _TOKEN, "quantity": -1},
    "quantity_zero": {"token": _TOKEN, "quantity": 0},
    "quantity_fraction": {"token": _TOKEN, "quantity": 1.5},
    "quantity_float_integral": {"token": _TOKEN, "quantity": 1.0},
    "quantity_string": {"token": _TOKEN, "quantity": "1"},
    "quantity_bool": {"token": _TOKEN, "quantity": True},
    "quantity_null": {"token": _TOKEN, "quantity": None},
    "quantity_huge": {"token": _TOKEN, "quantity": 10**30},
    "quantity_over_limit": {"token": _TOKEN, "quantity": 3},
    "quantity_list": {"token": _TOKEN, "quantity": [1]},
    "quantity_object": {"token": _TOKEN, "quantity": {"n": 1}},
    "unknown_field": {"token": _TOKEN, "quantity": 1, "coupon": "FREE"},
    "token_missing": {"quantity": 1},
    "token_int": {"token": 12345},
    "token_null": {"token": None},
    "token_list": {"token": ["abc"]},
    "token_empty": {"token": ""},
    "token_too_long": {"token": "t" * 129},
}

RAW_BODIES = {
    # name: (raw body, content type, expected status)
    "not_json": (b"token=abc&quantity=1", "application/json", 400),
    "truncated_json": (b'{"token": "abc", ', "application/json", 400),
    "json_array": (b'[{"token": "abc"}]', "application/json", 400),
    "json_string": (b'"abc"', "application/json", 400),
    "json_number": (b"1", "application/json", 400),
    "json_null": (b"null", "application/json", 400),
    "nan": (b'{"token": "abc", "quantity": NaN}', "application/json", 400),
    "empty_body": (b"", "application/json", 400),
    "empty_no_type": (b"", "", 400),
    "not_utf8": (b'{"token": "\xff\xfe"}', "application/json", 400),
    "deeply_nested": (b"[" * 100_000 + b"]" * 100_000, "application/json", 400),
    "form_encoded": (b"token=abc&quantity=1", "application/x-www-form-urlencoded", 415),
    "text_plain": (b'{"token": "abc"}', "text/plain", 415),
    "multipart": (b"--x\r\n\r\n--x--", "multipart/form-data; boundary=x", 415),
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_bad_json_bodies_are_400_and_touch_nothing(shopper, name):
    activity = make_activity(stock=5, per_user_limit=2)
    token = activity_token_ensure(activity_id=activity.pk)
    body = {k: (token if v is _TOKEN else v) for k, v in BAD_BODIES[name].items()}
    before = stock_state(activity)
    assert_error(buy(shopper, activity, **body), 400, "invalid_request")
    assert stock_state(activity) == before


@pytest.mark.parametrize("name", sorted(RAW_BODIES))
def test_malformed_requests_are_4xx_and_touch_nothing(shopper, name):
    activity = make_activity(stock=5)
    activity_token_ensure(activity_id=activity.pk)
    raw, content_type, status = RAW_BODIES[name]
    before = stock_state(activity)
    response = shopper.generic("POST", purchase_url(activity.pk), raw, content_type=content_type)
    assert_error(response, status, "invalid_request" if status == 400 else "unsupported_media_type")
    assert stock_state(activity) == before


def test_missing_quantity_defaults_to_one(shopper):
    activity = make_activity(stock=5, per_user_limit=3)
    response = buy(shopper, activity, token=activity_token_ensure(activity_id=activity.pk))
    assert response.status_code == 202
    assert response.json()["remaining"] == 4
    assert reservations_pending(activity_id=activity.pk)[0].quantity == 1


@pytest.mark.parametrize("activity_id", [0, 999_999, 2**63 - 1, 2**63, 2**64, 10**40])
def test_unknown_activity_is_404_everywhere(shopper, activity_id):
    activity = make_activity(stock=5)
    before = stock_state(activity)
    assert_error(shopper.post(purchase_url(activity_id), {"token": "x"}, format="json"), 404, "not_found")
    for path in ("flag", "result", ""):
        assert_error(shopper.get(f"/api/activities/{activity_id}/{path}"), 404, "not_found")
    assert stock_state(activity) == before


def test_wrong_method_is_405_json(shopper):
    activity = make_activity(stock=5)
    assert_error(shopper.get(purchase_url(activity.pk)), 405, "method_not_allowed")
    assert_error(shopper.post(f"/api/activities/{activity.pk}/flag"), 405, "method_not_allowed")


# --- the flag ------------------------------------------------------------------------


def test_flag_has_no_token_before_the_start_and_one_after():
    activity = make_activity(stock=5, started=False)
    client = APIClient()  # the flag is public
    response = client.get(f"/api/activities/{activity.pk}/flag")
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    flag = response.json()
    assert flag["started"] is False and flag["ended"] is False and flag["token"] is None
    # The contract's fields, and (docs/API.md) what is left for the page: remaining, sold_out.
    assert set(flag) == {"started", "ended", "token", "server_time", "start_at", "end_at", "remaining", "sold_out"}

    type(activity).objects.filter(pk=activity.pk).update(start_at=timezone.now() - timedelta(seconds=1))
    flag = client.get(f"/api/activities/{activity.pk}/flag").json()
    assert flag["started"] is True and flag["ended"] is False and flag["token"]
    # One token per activity, the same for everyone and on every call.
    assert client.get(f"/api/activities/{activity.pk}/flag").json()["token"] == flag["token"]
    activity.refresh_from_db()
    assert activity.purchase_token == flag["token"]

    type(activity).objects.filter(pk=activity.pk).update(end_at=timezone.now() - timedelta(seconds=1))
    flag = client.get(f"/api/activities/{activity.pk}/flag").json()
    assert flag["ended"] is True and flag["token"] is None


# --- the result ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the cancel's Redis return runs on commit
def test_result_goes_none_queued_ordered_and_failed(shopper):
    activity = make_activity(stock=5)
    token = activity_token_ensure(activity_id=activity.pk)
    result_url = f"/api/activities/{activity.pk}/result"

    response = shopper.get(result_url)
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    assert response.json() == {"code": "none", "order": None}

    assert buy(shopper, activity, token=token).status_code == 202
    assert shopper.get(result_url).json() == {"code": "queued", "order": None}

    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk))
    body = shopper.get(result_url).json()
    assert body["code"] == "ordered"
    assert body["order"]["status"] == "pending" and body["order"]["quantity"] == 1

    # "failed": the database guard refused the reservation (Redis had more than the DB).
    other = make_activity(stock=5)
    other_token = activity_token_ensure(activity_id=other.pk)
    SeckillStock.objects.filter(activity_id=other.pk).update(available=0)
    assert buy(shopper, other, token=other_token).status_code == 202
    orders_create_from_reservations(activity_id=other.pk, entries=reservations_pending(activity_id=other.pk))
    body = shopper.get(f"/api/activities/{other.pk}/result").json()
    assert body["code"] == "failed" and body["order"] is None and body["reason"] == "no_stock"
    assert AnomalyOrder.objects.filter(activity_id=other.pk, kind="db_guard_failed").count() == 1
    # Trying again supersedes the failure: the shopper's outcome is the new reservation.
    SeckillStock.objects.filter(activity_id=other.pk).update(available=5)
    assert buy(shopper, other, token=other_token).status_code == 202
    assert shopper.get(f"/api/activities/{other.pk}/result").json() == {"code": "queued", "order": None}
    orders_create_from_reservations(activity_id=other.pk, entries=reservations_pending(activity_id=other.pk))
    order_no = shopper.get(f"/api/activities/{other.pk}/result").json()["order"]["order_no"]
    assert shopper.post(f"/api/orders/{order_no}/cancel").status_code == 200
    body = shopper.get(f"/api/activities/{other.pk}/result").json()
    assert body["code"] == "ordered" and body["order"]["status"] == "cancelled"
