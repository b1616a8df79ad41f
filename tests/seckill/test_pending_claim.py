"""Sharded stock (S > 1): a purchase claims the shopper in their user partition (a
pending claim), then runs the shard script, then settles the claim. A Redis error between
the steps leaves the claim pending; it must not block the shopper for the rest of the
sale, nor ever let one shopper hold two reservations.

The interleavings are cut with the real scripts, in the order scripts._run_purchase_sharded
runs them; the shopper's next purchase goes through the real API.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from rest_framework.test import APIClient

from orders.models import Order
from seckill.purchase.reserve import purchase_reserve
from seckill.purchase.result import purchase_result
from seckill.sale.activities import activity_token_ensure
from seckill.sale.lifecycle import activity_warmup
from seckill.sale.reconciliation import reconcile
from seckill.sale.replay import reservations_replay
from seckill.sale.snapshot import activity_snapshot
from stock.keys import USER_PARTITIONS, ActivityKeys, claim_pending, claim_value
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending
from stock.scripts import CLAIM, SHARD_PURCHASE, ScriptCode

from ..factories import make_activity, make_users, token_of
from ..helpers import SHARDS, assert_identity, claim_of, shard_stocks

STALE_S = 60  # well past SECKILL_CLAIM_PENDING_TIMEOUT (10 s)


def partition_of(activity, user_id: int) -> ActivityKeys:
    return ActivityKeys(activity.pk).user_partition(user_id, USER_PARTITIONS)


def interrupted_purchase(activity, user_id: int, *, age_s: float, shard: int | None = None) -> tuple[str, str]:
    """The claim a purchase took ``age_s`` seconds ago, and with ``shard`` the shard script
    it ran then (a timeout after success); the settle step never ran."""
    client, part = stock_redis(), partition_of(activity, user_id)
    taken = int((time.time() - age_s) * 1000)
    pending = claim_pending(taken)
    assert CLAIM(keys=[part.users, part.failed, part.pending], args=[user_id, pending, taken], client=client) == 1
    if shard is None:
        return pending, ""
    shard_keys = ActivityKeys(activity.pk).shard(shard)
    code, _, reservation, _ = SHARD_PURCHASE(
        keys=[shard_keys.stock, shard_keys.log, shard_keys.drain],
        args=[user_id, 1, activity.per_user_limit, shard, 1000],
        client=client,
    )
    assert code == ScriptCode.RESERVED
    return pending, reservation.decode()


def api_purchase(activity, user) -> tuple[int, dict]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    token = activity_token_ensure(activity_id=activity.pk)
    response = client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json")
    return response.status_code, response.json()


def reservations_of(activity, user_id: int) -> list:
    return [e for e in reservations_pending(activity_id=activity.pk) if e.user_id == user_id]


@pytest.mark.django_db
def test_a_redis_error_after_the_claim_does_not_block_the_shopper_for_the_rest_of_the_sale(settings):
    activity = make_activity(stock=16, shards=SHARDS)
    (user,) = make_users(1)
    client, keys = stock_redis(), ActivityKeys(activity.pk)
    # A real Redis error in the shard step: every shard's stock key has the wrong type.
    for shard_keys in keys.shards(SHARDS):
        client.delete(shard_keys.stock)
        client.hset(shard_keys.stock, "broken", 1)
    status, body = api_purchase(activity, user)
    assert (status, body["code"]) == (503, "busy")
    assert claim_of(activity, user.pk).startswith(b"*")  # left pending by the error
    assert purchase_result(activity_id=activity.pk, user_id=user.pk)[0] == "queued"
    for shard_keys in keys.shards(SHARDS):
        client.delete(shard_keys.stock)
    activity_warmup(activity_id=activity.pk, force=True)

    # Younger than the timeout it may be a purchase in flight: still a duplicate.
    status, body = api_purchase(activity, user)
    assert (status, body["code"]) == (409, "duplicate")
    assert claim_of(activity, user.pk).startswith(b"*")

    settings.SECKILL_CLAIM_PENDING_TIMEOUT = 0  # the claim has aged past it
    status, body = api_purchase(activity, user)

    assert status == 202, body
    (entry,) = reservations_of(activity, user.pk)
    assert entry.reservation_id == body["reservation"]
    assert claim_of(activity, user.pk) == claim_value(entry.shard, entry.reservation_id).encode()
    assert client.zcard(partition_of(activity, user.pk).pending) == 0
    assert api_purchase(activity, user)[1]["code"] == "duplicate"
    assert sum(shard_stocks(activity)) == 15
    assert_identity(activity)


@pytest.mark.django_db
def test_a_timeout_after_the_shard_script_ran_keeps_its_reservation_as_the_claim():
    activity = make_activity(stock=16, shards=SHARDS)
    (user,) = make_users(1)
    _, reservation = interrupted_purchase(activity, user.pk, age_s=STALE_S, shard=3)

    status, body = api_purchase(activity, user)

    # The reservation was made: the pending claim becomes its claim, never a second one.
    assert (status, body["code"]) == (409, "duplicate")
    assert claim_of(activity, user.pk) == claim_value(3, reservation).encode()
    assert [e.reservation_id for e in reservations_of(activity, user.pk)] == [reservation]
    assert sum(shard_stocks(activity)) == 15
    assert purchase_result(activity_id=activity.pk, user_id=user.pk)[0] == "queued"
    assert reservations_replay(activity_id=activity.pk, grace_seconds=-1).created == 1
    order = Order.objects.get(activity=activity, user=user)
    assert (order.shard, order.reservation_id) == (3, reservation)
    assert assert_identity(activity)["units_pending"] == 1


@pytest.mark.django_db
def test_a_pending_claim_whose_reservation_is_ordered_already_becomes_the_orders_claim():
    activity = make_activity(stock=16, shards=SHARDS)
    (user,) = make_users(1)
    _, reservation = interrupted_purchase(activity, user.pk, age_s=STALE_S, shard=5)
    # The drain turned the reservation into an order: it has left the log.
    assert reservations_replay(activity_id=activity.pk, grace_seconds=-1).created == 1
    assert reservations_of(activity, user.pk) == []

    status, body = api_purchase(activity, user)

    assert (status, body["code"]) == (409, "duplicate")
    assert claim_of(activity, user.pk) == claim_value(5, reservation).encode()
    assert Order.objects.filter(activity=activity, user=user).count() == 1
    assert reservations_pending(activity_id=activity.pk) == []
    assert_identity(activity)


@pytest.mark.django_db(transaction=True)
def test_shoppers_racing_over_their_stale_claim_end_with_one_reservation():
    activity = make_activity(stock=16, shards=SHARDS)
    (user,) = make_users(1)
    interrupted_purchase(activity, user.pk, age_s=STALE_S)
    snapshot = activity_snapshot(activity.pk)

    def attempt(_):
        try:
            return purchase_reserve(activity=snapshot, user_id=user.pk, quantity=1).reservation_id
        except Exception as exc:
            return getattr(exc, "code", repr(exc))
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = list(pool.map(attempt, range(40)))

    reserved = [o for o in outcomes if o != "duplicate"]
    assert len(reserved) == 1, outcomes
    (entry,) = reservations_of(activity, user.pk)
    assert entry.reservation_id == reserved[0]
    assert claim_of(activity, user.pk) == claim_value(entry.shard, entry.reservation_id).encode()
    assert sum(shard_stocks(activity)) == 15
    assert_identity(activity)


@pytest.mark.django_db
def test_reconciliation_settles_stale_pending_claims_and_leaves_young_ones():
    activity = make_activity(stock=16, shards=SHARDS)
    lost, reserved, in_flight = make_users(3)
    interrupted_purchase(activity, lost.pk, age_s=STALE_S)
    _, reservation = interrupted_purchase(activity, reserved.pk, age_s=STALE_S, shard=2)
    young, _ = interrupted_purchase(activity, in_flight.pk, age_s=0)
    assert purchase_result(activity_id=activity.pk, user_id=lost.pk)[0] == "queued"

    report = reconcile(activity_id=activity.pk)

    assert report["actions"]["pending_claims_settled"] == 2
    assert report["identity_ok"], report
    # Nothing was reserved: the shopper is free again, and told so.
    assert claim_of(activity, lost.pk) is None
    assert purchase_result(activity_id=activity.pk, user_id=lost.pk)[0] == "none"
    assert claim_of(activity, reserved.pk) == claim_value(2, reservation).encode()
    assert claim_of(activity, in_flight.pk) == young.encode()  # may still be a purchase in flight
    assert reconcile(activity_id=activity.pk)["actions"]["pending_claims_settled"] == 0
    status, body = api_purchase(activity, lost)
    assert status == 202, body
    assert Order.objects.filter(activity=activity).count() == 0
    assert len(reservations_pending(activity_id=activity.pk)) == 2
