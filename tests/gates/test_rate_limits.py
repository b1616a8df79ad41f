"""Rate limits through a real gunicorn on the real Redis: per shopper, per client address
(behind a trusted proxy header), and the global admission cap of an activity."""

import time

import pytest

from orders.models import Order
from seckill.models import Activity
from seckill.sale.activities import activity_token_ensure
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_snapshot_forget

from ..factories import make_activity, make_users
from ..helpers import calls_since, purchase, redis_calls
from .support import assert_stock_invariant, concurrently, keys_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_one_shopper_firing_100_requests_is_limited_after_the_configured_count(gunicorn, celery_worker):
    # An hour-long window: the burst cannot straddle two windows, so the count is exact.
    base = gunicorn(SECKILL_RATE_PER_USER="10/h")
    activity = make_activity(stock=10)
    (user,) = make_users(1)
    key, token = keys_of([user])[user.pk], activity_token_ensure(activity_id=activity.pk)

    started = time.monotonic()
    answers = concurrently([lambda: purchase(base, activity.pk, key, token)] * 100, threads=100)
    elapsed = time.monotonic() - started
    statuses = [status for status, _, _ in answers]

    assert statuses.count(429) == 90, (sorted(statuses), elapsed)
    assert statuses.count(202) == 1  # the other 9 let through are the shopper's duplicates
    assert statuses.count(409) == 9
    limited = [(body, headers) for status, body, headers in answers if status == 429]
    assert all(body["code"] == "rate_limited" for body, _ in limited)
    assert all(int(headers["Retry-After"]) >= 1 for _, headers in limited)
    assert_stock_invariant(activity, 1)


def test_per_activity_rate_overrides_the_setting(gunicorn):
    base = gunicorn(SECKILL_RATE_PER_USER="off")
    activity = make_activity(stock=10)
    Activity.objects.filter(pk=activity.pk).update(rate_per_user="3/h")
    activity_snapshot_forget(activity.pk)
    (user,) = make_users(1)
    key, token = keys_of([user])[user.pk], activity_token_ensure(activity_id=activity.pk)
    statuses = [purchase(base, activity.pk, key, token)[0] for _ in range(6)]
    assert statuses == [202, 409, 409, 429, 429, 429]
    assert redis_remaining(activity.pk) == 9


def test_50_shoppers_behind_one_address_are_limited_per_address(gunicorn, celery_worker):
    base = gunicorn(SECKILL_RATE_PER_IP="20/h", SECKILL_TRUSTED_PROXY_HEADER="X-Forwarded-For")
    activity = make_activity(stock=100)
    users = make_users(60)
    keys, token = keys_of(users), activity_token_ensure(activity_id=activity.pk)

    # The proxy appends the address it saw; what the client put in front of it is ignored.
    behind_nat = [
        (
            lambda k=keys[u.pk], i=i: purchase(
                base, activity.pk, k, token, headers={"X-Forwarded-For": f"10.9.{i}.1, 198.51.100.7"}
            )
        )
        for i, u in enumerate(users[:50])
    ]
    elsewhere = [
        (
            lambda k=keys[u.pk], i=i: purchase(
                base, activity.pk, k, token, headers={"X-Forwarded-For": f"198.51.100.{100 + i}"}
            )
        )
        for i, u in enumerate(users[50:])
    ]
    nat_statuses = [s for s, _, _ in concurrently(behind_nat, threads=50)]
    other_statuses = [s for s, _, _ in concurrently(elsewhere, threads=10)]

    assert nat_statuses.count(202) == 20, sorted(nat_statuses)
    assert nat_statuses.count(429) == 30
    assert other_statuses == [202] * 10  # other addresses are not held back by that one
    assert_stock_invariant(activity, 30)


def test_a_forged_forwarded_for_is_not_an_address_without_a_trusted_proxy(gunicorn):
    """No SECKILL_TRUSTED_PROXY_HEADER: the socket's address counts, whatever
    X-Forwarded-For a client sends, even from a peer the server itself trusts (loopback:
    server.worker keeps uvicorn from rewriting the address)."""
    base = gunicorn(SECKILL_RATE_PER_IP="3/h")
    activity = make_activity(stock=10)
    users = make_users(6)
    keys, token = keys_of(users), activity_token_ensure(activity_id=activity.pk)
    statuses = [
        purchase(base, activity.pk, keys[u.pk], token, headers={"X-Forwarded-For": f"203.0.113.{i}"})[0]
        for i, u in enumerate(users)
    ]
    assert statuses == [202, 202, 202, 429, 429, 429]
    assert redis_remaining(activity.pk) == 7


def test_global_cap_sheds_the_excess_and_every_admitted_purchase_is_correct(gunicorn, celery_worker):
    base = gunicorn()
    activity = make_activity(stock=1000)  # more than the cap can let through: nothing sells out
    Activity.objects.filter(pk=activity.pk).update(admission_rate=5, admission_burst=15)
    activity_snapshot_forget(activity.pk)
    users = make_users(300)
    keys, token = keys_of(users), activity_token_ensure(activity_id=activity.pk)

    started = time.monotonic()
    answers = concurrently([(lambda k=keys[u.pk]: purchase(base, activity.pk, k, token)) for u in users], threads=100)
    elapsed = time.monotonic() - started
    statuses = [s for s, _, _ in answers]

    admitted = statuses.count(202)
    assert set(statuses) <= {202, 429}, sorted(set(statuses))
    # The bucket holds 15 and refills 5 a second: nothing beyond that reached the stock.
    assert 15 <= admitted <= 15 + 5 * (elapsed + 1), (admitted, elapsed)
    assert statuses.count(429) == 300 - admitted
    assert all(body["code"] == "rate_limited" and "Retry-After" in h for s, body, h in answers if s == 429)
    assert Order.objects.filter(activity=activity).values("user").distinct().count() <= admitted
    assert_stock_invariant(activity, admitted)


def test_a_limited_shopper_is_answered_from_the_process_memory_until_the_window_ends(gunicorn):
    """Over a fixed window's limit stays over until the window ends: each web process says
    429 itself meanwhile, counted in Redis's own INFO commandstats."""
    base = gunicorn(SECKILL_RATE_PER_USER="2/h", SECKILL_ACTIVITY_CACHE_TTL="1", SECKILL_ACTIVITY_REDIS_TTL="120")
    activity = make_activity(stock=10)
    (user,) = make_users(1)
    key, token = keys_of([user])[user.pk], activity_token_ensure(activity_id=activity.pk)
    # Every worker (2) meets the limit once: 202, 409, then a 429 from Redis in each.
    statuses = [purchase(base, activity.pk, key, token)[0] for _ in range(8)]
    assert statuses[:2] == [202, 409] and set(statuses[2:]) == {429}, statuses

    before = redis_calls()
    answers = concurrently([lambda: purchase(base, activity.pk, key, token)] * 300, threads=20)
    calls = calls_since(before)
    assert {status for status, _, _ in answers} == {429}
    assert all(body["code"] == "rate_limited" for _, body, _ in answers)
    assert all(int(headers["Retry-After"]) >= 1 for _, _, headers in answers)
    # The counter is asked only until each process has remembered the verdict: at most once
    # per server thread (2 workers x 16 threads, if a process had not met the limit in the
    # warm-up and all its threads asked at once), each ask being one EVALSHA of the gate
    # script (an INCR inside). Without the memory: one of each for every one of the 300.
    counted = sum(n for name, n in calls.items() if name in ("cmdstat_incr", "cmdstat_evalsha"))
    assert counted <= 2 * (2 * 16), calls
    assert redis_remaining(activity.pk) == 9
