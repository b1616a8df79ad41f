"""Blacklist, eligibility and captcha: the 403 codes of API.md, and the stock untouched.
Django's test client against the real PostgreSQL and Redis."""

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone, translation
from rest_framework.test import APIClient

from seckill.models import Activity, BlacklistEntry, ShopperProfile
from seckill.purchase.captcha import captcha_consume, captcha_issue
from seckill.purchase.shoppers import blacklist_entry_save, shopper_profile_save
from seckill.sale.activities import activity_token_ensure
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_snapshot_forget
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def production_caches(settings):
    """The copies in this process and in Redis as in production (the test settings turn
    them off); the tests then also show that every change reaches them."""
    settings.SECKILL_ACTIVITY_REDIS_TTL = 60.0
    settings.SECKILL_BLACKLIST_CACHE_TTL = 2.0
    settings.SECKILL_BLACKLIST_REDIS_TTL = 60.0
    settings.SECKILL_SHOPPER_CACHE_TTL = 60


def client_for(user, **headers) -> APIClient:
    client = APIClient(**headers)
    client.force_authenticate(user)
    return client


def buy(client, activity, **extra):
    token = activity_token_ensure(activity_id=activity.pk)
    return client.post(f"/api/activities/{activity.pk}/purchase", {"token": token, **extra}, format="json")


def assert_untouched(activity, stock=10):
    assert redis_remaining(activity.pk) == stock
    assert stock_redis().xlen(ActivityKeys(activity.pk).log) == 0


def gated(activity, **fields):
    Activity.objects.filter(pk=activity.pk).update(**fields)
    activity_snapshot_forget(activity.pk)
    return activity


# --- blacklist -------------------------------------------------------------------------


def test_blacklisted_user_is_refused_and_stock_untouched():
    activity = make_activity(stock=10)
    bad, good = make_users(2)
    blacklist_entry_save(entry=BlacklistEntry(kind="user", value=str(bad.pk), reason="bot"))
    response = buy(client_for(bad), activity)
    assert response.status_code == 403
    assert response.json()["code"] == "blacklisted"
    assert_untouched(activity)
    assert buy(client_for(good), activity).status_code == 202


@override_settings(SECKILL_TRUSTED_PROXY_HEADER="X-Forwarded-For")
def test_blacklisted_address_network_and_device_are_refused():
    activity = make_activity(stock=10)
    a, b, c, d = make_users(4)
    blacklist_entry_save(entry=BlacklistEntry(kind="ip", value="203.0.113.9"))
    blacklist_entry_save(entry=BlacklistEntry(kind="ip", value="198.51.100.0/24"))
    blacklist_entry_save(entry=BlacklistEntry(kind="device", value="dev-666"))

    for user, headers in [
        (a, {"HTTP_X_FORWARDED_FOR": "203.0.113.9"}),
        (b, {"HTTP_X_FORWARDED_FOR": "1.2.3.4, 198.51.100.77"}),
        (c, {"HTTP_X_DEVICE_ID": "dev-666"}),
    ]:
        response = buy(client_for(user, **headers), activity)
        assert (response.status_code, response.json()["code"]) == (403, "blacklisted"), headers
    assert_untouched(activity)
    # A forged left-most entry does not get a listed client past the proxy's own entry,
    # nor does it get an unlisted one blocked.
    assert buy(client_for(d, HTTP_X_FORWARDED_FOR="203.0.113.9, 192.0.2.1"), activity).status_code == 202


def test_expired_blacklist_entries_do_not_count():
    activity = make_activity(stock=10)
    (user,) = make_users(1)
    blacklist_entry_save(
        entry=BlacklistEntry(kind="user", value=str(user.pk), expires_at=timezone.now() - timedelta(minutes=1))
    )
    assert buy(client_for(user), activity).status_code == 202


def test_bad_blacklist_values_are_rejected():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        blacklist_entry_save(entry=BlacklistEntry(kind="ip", value="not-an-address"))
    with pytest.raises(ValidationError):
        blacklist_entry_save(entry=BlacklistEntry(kind="user", value="alice"))


# --- eligibility ------------------------------------------------------------------------


def test_membership_level_below_the_minimum_is_not_eligible():
    activity = gated(make_activity(stock=10), min_member_level=2)
    low, none, high = make_users(3)
    shopper_profile_save(profile=ShopperProfile(user=low, member_level=1))
    shopper_profile_save(profile=ShopperProfile(user=high, member_level=3))
    for user in (low, none):
        response = buy(client_for(user), activity)
        assert (response.status_code, response.json()["code"]) == (403, "not_eligible")
    assert_untouched(activity)
    assert buy(client_for(high), activity).status_code == 202


def test_a_new_account_is_not_eligible_and_a_level_up_applies_at_once():
    activity = gated(make_activity(stock=10), min_account_age_days=30, min_member_level=1)
    young, old = make_users(2)
    get_user_model().objects.filter(pk=old.pk).update(date_joined=timezone.now() - timedelta(days=31))
    profile = ShopperProfile(user=old, member_level=0)
    shopper_profile_save(profile=profile)
    shopper_profile_save(profile=ShopperProfile(user=young, member_level=5))

    assert buy(client_for(young), activity).json()["code"] == "not_eligible"  # too young
    assert buy(client_for(old), activity).json()["code"] == "not_eligible"  # level 0
    assert_untouched(activity)
    profile.member_level = 1
    shopper_profile_save(profile=profile)
    assert buy(client_for(old), activity).status_code == 202


# --- captcha ----------------------------------------------------------------------------


def answer_of(question: str) -> str:
    a, b = question.removeprefix("What is ").removesuffix("?").split(" + ")
    return str(int(a) + int(b))


def test_captcha_missing_wrong_reused_and_someone_elses_are_refused():
    activity = gated(make_activity(stock=10), captcha_required=True)
    user, other = make_users(2)
    client = client_for(user)

    response = buy(client, activity)
    assert (response.status_code, response.json()["code"]) == (403, "captcha_required")

    challenge = client.post(f"/api/activities/{activity.pk}/captcha").json()
    wrong = str(int(answer_of(challenge["question"])) + 1)
    response = buy(client, activity, captcha_id=challenge["captcha_id"], captcha_answer=wrong)
    assert (response.status_code, response.json()["code"]) == (403, "captcha_invalid")
    # One attempt per challenge: after a wrong answer the right one is refused too.
    right = answer_of(challenge["question"])
    response = buy(client, activity, captcha_id=challenge["captcha_id"], captcha_answer=right)
    assert response.json()["code"] == "captcha_invalid"

    theirs = client_for(other).post(f"/api/activities/{activity.pk}/captcha").json()
    response = buy(client, activity, captcha_id=theirs["captcha_id"], captcha_answer=answer_of(theirs["question"]))
    assert response.json()["code"] == "captcha_invalid"
    assert_untouched(activity)

    challenge = client.post(f"/api/activities/{activity.pk}/captcha").json()
    # The answer may come as a number, as a JSON client would send a sum.
    response = buy(
        client, activity, captcha_id=challenge["captcha_id"], captcha_answer=int(answer_of(challenge["question"]))
    )
    assert response.status_code == 202
    assert redis_remaining(activity.pk) == 9

    # Reused after a success: refused before the duplicate check is even reached.
    response = buy(
        client, activity, captcha_id=challenge["captcha_id"], captcha_answer=answer_of(challenge["question"])
    )
    assert response.json()["code"] == "captcha_invalid"
    assert redis_remaining(activity.pk) == 9


def test_the_question_comes_in_the_language_the_page_asks_for():
    """The activity page sends its own language; the zh-Hans page shows a Chinese question."""
    activity = gated(make_activity(stock=10), captcha_required=True)
    (user,) = make_users(1)
    client = client_for(user)
    # The request switches this thread's language (LocaleMiddleware); override switches it back after.
    with translation.override("en"):
        challenge = client.post(f"/api/activities/{activity.pk}/captcha", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    a, b = re.fullmatch(r"(\d+) 加 (\d+) 等于多少？", challenge["question"]).groups()
    response = buy(client, activity, captcha_id=challenge["captcha_id"], captcha_answer=str(int(a) + int(b)))
    assert response.status_code == 202
    assert redis_remaining(activity.pk) == 9


def test_one_captcha_answered_by_20_threads_at_once_succeeds_once():
    activity = make_activity(stock=10)
    (user,) = make_users(1)
    challenge = captcha_issue(activity_id=activity.pk, user_id=user.pk)
    answer = answer_of(challenge["question"])
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(
            pool.map(
                lambda _: captcha_consume(
                    activity_id=activity.pk, user_id=user.pk, challenge_id=challenge["captcha_id"], answer=answer
                ),
                range(20),
            )
        )
    assert results.count(True) == 1


@pytest.mark.parametrize(
    "extra",
    [
        {"captcha_id": 5},
        {"captcha_id": ["x"]},
        {"captcha_answer": True},
        {"captcha_answer": "9" * 65},
        {"captcha_answer": {"a": 1}},
        {"captcha": "x"},
    ],
)
def test_malformed_captcha_fields_are_400(extra):
    activity = gated(make_activity(stock=10), captcha_required=True)
    (user,) = make_users(1)
    response = buy(client_for(user), activity, **extra)
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert_untouched(activity)


# --- the order of the checks --------------------------------------------------------------


def test_rate_limit_answers_before_blacklist_and_blacklist_before_eligibility_and_captcha():
    activity = gated(make_activity(stock=10), rate_per_user="1/h", min_member_level=3, captcha_required=True)
    (user,) = make_users(1)
    blacklist_entry_save(entry=BlacklistEntry(kind="user", value=str(user.pk)))
    client = client_for(user)
    assert buy(client, activity).json()["code"] == "blacklisted"
    assert buy(client, activity).json()["code"] == "rate_limited"
    BlacklistEntry.objects.all().delete()
    gated(activity, rate_per_user="off")
    from seckill.purchase.shoppers import blacklist_forget

    blacklist_forget()
    assert buy(client, activity).json()["code"] == "not_eligible"
    gated(activity, min_member_level=0)
    assert buy(client, activity).json()["code"] == "captcha_required"
    assert_untouched(activity)


def test_sold_out_memory_answers_without_the_later_gates():
    activity = gated(make_activity(stock=1), captcha_required=True)
    buyer, late = make_users(2)
    client = client_for(buyer)
    challenge = client.post(f"/api/activities/{activity.pk}/captcha").json()
    ok = buy(client, activity, captcha_id=challenge["captcha_id"], captcha_answer=answer_of(challenge["question"]))
    assert ok.status_code == 202
    with override_settings(SECKILL_SOLD_OUT_TTL=60):
        # Redis says none are left once; this process then answers alone, before the
        # captcha gate, so a late shopper does not burn a captcha on a sold-out sale.
        late_client = client_for(late)
        challenge = late_client.post(f"/api/activities/{activity.pk}/captcha").json()
        first = buy(
            late_client, activity, captcha_id=challenge["captcha_id"], captcha_answer=answer_of(challenge["question"])
        )
        assert first.json()["code"] == "sold_out"
        assert buy(late_client, activity).json()["code"] == "sold_out"
    assert redis_remaining(activity.pk) == 0
