"""Sharded stock (Activity.shards = S > 1) on a single Redis: the purchase claims the
shopper in a user partition, then takes units from a random shard (up to three tries);
everything after the purchase (order, ack, release, return, replay, warm-up,
reconciliation, close) uses the shard the units came from.

The concurrency invariants with S = 8 (real gunicorn and Celery processes, on this Redis
and on a real Redis Cluster) are the "8-shards" cases of
tests/seckill/test_purchase_concurrency.py.
"""

import pytest
from django.db.models import Sum
from rest_framework.test import APIClient

from inventory.models import SeckillStock
from orders.models import Order
from orders.services.creation import orders_create_from_reservations
from orders.services.lifecycle import order_cancel
from seckill.purchase.result import purchase_result
from seckill.sale.activities import activity_token_ensure
from seckill.sale.lifecycle import activity_keys_remove, activity_warmup
from seckill.sale.replay import reservations_replay
from seckill.sale.selectors import redis_remaining, units_left_many
from stock.keys import USER_PARTITIONS, ActivityKeys, claim_value
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending
from stock.scripts import ScriptCode, shard_restocks

from ..factories import make_activity, make_users, token_of
from ..helpers import SHARDS, assert_identity, claim_of, reserve, shard_stocks

# --- the purchase ----------------------------------------------------------------


@pytest.mark.django_db
def test_warm_up_splits_the_stock_evenly_and_keeps_loaded_once_in_sum():
    activity = make_activity(stock=100, shards=SHARDS, safety_stock=3)
    assert shard_stocks(activity) == [13, 12, 12, 12, 12, 12, 12, 12]
    assert redis_remaining(activity.pk) == 97
    report = assert_identity(activity)
    assert (report["redis_loaded"], report["redis_remaining"]) == (97, 97)


@pytest.mark.django_db
def test_purchase_through_the_api_claims_the_shopper_in_their_partition():
    activity = make_activity(stock=16, shards=SHARDS)
    (user,) = make_users(1)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    token = activity_token_ensure(activity_id=activity.pk)
    url = f"/api/activities/{activity.pk}/purchase"
    response = client.post(url, {"token": token}, format="json")
    assert response.status_code == 202, response.content
    (entry,) = reservations_pending(activity_id=activity.pk)
    assert entry.reservation_id == response.json()["reservation"]
    assert claim_of(activity, user.pk) == claim_value(entry.shard, entry.reservation_id).encode()
    assert purchase_result(activity_id=activity.pk, user_id=user.pk)[0] == "queued"
    again = client.post(url, {"token": token}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "duplicate"
    assert sum(shard_stocks(activity)) == 15 and len(reservations_pending(activity_id=activity.pk)) == 1


@pytest.mark.django_db
def test_a_sold_out_shard_sends_the_purchase_to_another_shard():
    # Two shards of one unit each: whichever shard is tried first, both get sold.
    activity = make_activity(stock=2, shards=2)
    users = make_users(3)
    first, second = reserve(activity, users[0].pk), reserve(activity, users[1].pk)
    assert (first.code, second.code) == (ScriptCode.RESERVED, ScriptCode.RESERVED)
    assert {first.shard, second.shard} == {0, 1}
    third = reserve(activity, users[2].pk)
    assert third.code == ScriptCode.SOLD_OUT
    # Nobody was left claimed by the refusal: the shopper may try again later.
    assert claim_of(activity, users[2].pk) is None
    assert shard_stocks(activity) == [0, 0]
    assert_identity(activity)


@pytest.mark.django_db
def test_a_unit_on_an_untried_shard_is_found():
    """Three random tries of eight shards may miss the one shard with stock: the purchase
    then reads the others and takes the unit there, so the first buyer gets it."""
    activity = make_activity(stock=1, shards=SHARDS)  # shard 0 holds the only unit
    assert shard_stocks(activity) == [1] + [0] * (SHARDS - 1)
    first, second = make_users(2)
    assert reserve(activity, first.pk).code == ScriptCode.RESERVED
    assert reserve(activity, second.pk).code == ScriptCode.SOLD_OUT
    assert shard_stocks(activity) == [0] * SHARDS
    assert_identity(activity)


@pytest.mark.django_db
def test_not_warmed_shard_is_busy_and_releases_the_claim():
    activity = make_activity(stock=8, shards=SHARDS)
    (user,) = make_users(1)
    client = stock_redis()
    client.delete(*[k.stock for k in ActivityKeys(activity.pk).shards(SHARDS)])
    assert reserve(activity, user.pk).code == ScriptCode.NOT_WARMED
    assert claim_of(activity, user.pk) is None


# --- after the purchase -------------------------------------------------------------


@pytest.mark.django_db
def test_orders_cancel_and_return_to_their_shard(django_capture_on_commit_callbacks):
    activity = make_activity(stock=16, shards=SHARDS)
    users = make_users(6)
    for user in users:
        assert reserve(activity, user.pk).code == ScriptCode.RESERVED
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk))
    assert Order.objects.filter(activity=activity).count() == 6
    assert reservations_pending(activity_id=activity.pk) == []
    assert SeckillStock.objects.get(activity=activity).available == 10
    assert_identity(activity)

    order = Order.objects.filter(activity=activity).first()
    before = shard_stocks(activity)
    with django_capture_on_commit_callbacks(execute=True):  # the Redis part runs after the commit
        order_cancel(order=order, reason="shopper")
    after = shard_stocks(activity)
    assert after[order.shard] == before[order.shard] + 1
    assert [a for i, a in enumerate(after) if i != order.shard] == [b for i, b in enumerate(before) if i != order.shard]
    assert claim_of(activity, order.user_id) is None  # free to try again
    assert_identity(activity)
    assert reserve(activity, order.user_id).code == ScriptCode.RESERVED


@pytest.mark.django_db
def test_replay_creates_the_order_of_a_lost_enqueue_on_its_shard():
    activity = make_activity(stock=16, shards=SHARDS)
    users = make_users(5)
    replies = [reserve(activity, u.pk) for u in users]  # no task enqueued: "lost"
    outcome = reservations_replay(activity_id=activity.pk, grace_seconds=-1)
    assert outcome.created == 5
    for user, reply in zip(users, replies, strict=True):
        order = Order.objects.get(activity=activity, user=user)
        assert (order.shard, order.reservation_id) == (reply.shard, reply.reservation_id)
    assert all(stock_redis().xlen(k.log) == 0 for k in ActivityKeys(activity.pk).shards(SHARDS))
    assert Order.objects.filter(activity=activity).aggregate(u=Sum("quantity"))["u"] == 5
    assert_identity(activity)


@pytest.mark.django_db
def test_rewarm_derives_the_shards_from_the_database_and_the_logs():
    activity = make_activity(stock=40, shards=SHARDS)
    users = make_users(10)
    for user in users:
        reserve(activity, user.pk)
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk)[:4])
    # Redis restarted empty: the stock is derived again (40 - 4 ordered - 6 in the logs).
    client = stock_redis()
    keys = ActivityKeys(activity.pk)
    client.delete(*[k.stock for k in keys.shards(SHARDS)], *[k.loaded for k in keys.shards(SHARDS)])
    client.delete(*[keys.partition(p).users for p in range(USER_PARTITIONS)])
    result = activity_warmup(activity_id=activity.pk, force=True)
    assert result.remaining == 30 and result.participants == 10
    assert sum(shard_stocks(activity)) == 30
    # Participants came back in their partitions: nobody buys twice.
    assert all(reserve(activity, u.pk).code == ScriptCode.DUPLICATE for u in users)
    assert_identity(activity)


@pytest.mark.django_db
def test_pages_show_every_shard_and_the_reserve_read_now():
    """What pages, the list, the flag and the API show: the units still for sale, every
    shard's and the database reserve's, read when asked (no figure refreshed by beat)."""
    activity = make_activity(stock=24, shards=SHARDS, db_reserve=2)
    single = make_activity(stock=5, db_reserve=1)
    users = make_users(3)
    assert units_left_many([activity.pk, single.pk]) == {activity.pk: 24, single.pk: 5}, "a new sale: all of it"
    for user in users:
        reserve(activity, user.pk)
    reserve(single, users[0].pk)
    assert units_left_many([activity.pk, single.pk]) == {activity.pk: 21, single.pk: 4}


@pytest.mark.django_db(transaction=True)
def test_a_sharded_zero_is_settled_by_a_second_read():
    """S > 1: "nothing left" is a fact only when every shard was short at one moment: a
    second read of the restock counts finds no rise since the first."""
    activity = make_activity(stock=SHARDS, shards=SHARDS)
    users = make_users(SHARDS + 1)
    for user in users[:SHARDS]:
        assert reserve(activity, user.pk).code == ScriptCode.RESERVED
    layout = StockLayout(activity.pk, SHARDS)
    left = layout.units_left(stock_redis())
    assert (left.units, left.settled, left.sold_out) == (0, True, True)
    assert reserve(activity, users[SHARDS].pk).code == ScriptCode.SOLD_OUT
    restocks_before = shard_restocks(stock_redis(), layout.keys, SHARDS)
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk))
    order_cancel(order=Order.objects.filter(activity=activity).first(), reason="shopper")
    assert sum(shard_restocks(stock_redis(), layout.keys, SHARDS)) == sum(restocks_before) + 1, "a return counts"
    assert layout.units_left(stock_redis()).units == 1
    assert reserve(activity, users[SHARDS].pk).code == ScriptCode.RESERVED


@pytest.mark.django_db
def test_close_removes_every_shard_and_partition_key():
    activity = make_activity(stock=24, shards=SHARDS)
    other = make_activity(stock=5)
    for user in make_users(20):
        reserve(activity, user.pk)
    client = stock_redis()
    assert list(client.scan_iter(match=f"*{{a{activity.pk}[su]*"))
    assert activity_keys_remove(activity_id=activity.pk) > 0
    assert not list(client.scan_iter(match=f"*{{a{activity.pk}[}}su]*"))
    assert client.get(ActivityKeys(other.pk).stock) == b"5"  # another activity's keys stay
