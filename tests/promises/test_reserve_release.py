"""The database reserve is not stock kept back for ever, and it never makes "sold out" a lie:
the first purchase that finds Redis's share short while the reserve holds units hands the
reserve over (the database, then Redis) and buys from it; "sold out" is answered only when
no unit is left anywhere. Reconciliation is the net behind it."""

import pytest

from core.errors import ApiError
from inventory.models import SeckillStock
from inventory.services import stock_reserve_release
from orders.models import Order
from orders.services.lifecycle import order_cancel
from seckill.purchase.fallback import purchase_fallback
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.reconciliation import reconcile
from seckill.sale.replay import reservations_drain
from seckill.sale.selectors import redis_remaining, units_left_many
from seckill.sale.snapshot import activity_snapshot
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users

pytestmark = pytest.mark.django_db(transaction=True)


def _buy(activity, user, quantity: int = 1):
    try:
        return purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=quantity)
    except ApiError as exc:
        return exc.code


@pytest.mark.parametrize("shards", [1, 4])
def test_the_reserve_joins_redis_when_its_share_runs_short_and_sold_out_comes_only_after_it(shards):
    """Seen failing on the code before (the first refusal after Redis's share sold out was
    ``sold_out``, and reconciliation sold the reserve later to whoever still retried)."""
    activity = make_activity(stock=8, db_reserve=3, shards=shards)
    users = make_users(10)
    assert redis_remaining(activity.pk) == 5
    assert units_left_many([activity.pk]) == {activity.pk: 8}, "a new sale shows all of its stock"
    assert all(not isinstance(_buy(activity, u), str) for u in users[:5])
    assert units_left_many([activity.pk]) == {activity.pk: 3}, "the reserve is still for sale"
    # Redis's share is gone: the next purchase hands the reserve over and buys from it.
    assert not isinstance(_buy(activity, users[5]), str)
    stock = SeckillStock.objects.get(activity=activity)
    assert (stock.reserve, stock.released) == (0, 3)
    assert stock_redis().get(ActivityKeys(activity.pk).reserve) == b"0"
    with pytest.raises(ApiError) as refused:  # the database path has nothing left to sell
        purchase_fallback(activity=activity_snapshot(activity.pk), user_id=users[9].pk, quantity=1)
    assert refused.value.code == "busy"

    assert all(not isinstance(_buy(activity, u), str) for u in users[6:8])
    assert _buy(activity, users[8]) == "sold_out", "now no unit is left anywhere"
    assert units_left_many([activity.pk]) == {activity.pk: 0}
    reservations_drain(activity_id=activity.pk)
    assert Order.objects.filter(activity=activity).count() == 8
    stock.refresh_from_db()
    assert (stock.available, stock.reserve, stock.released) == (0, 0, 3)
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["reserve_drift"] == 0, report
    assert report["actions"]["reserve_units_released"] == 0, "nothing left for the net"


def test_a_quantity_the_share_cannot_cover_hands_the_reserve_over_too():
    """Two units asked, one left in Redis's share and two in the reserve: not "sold out"."""
    activity = make_activity(stock=5, db_reserve=2, per_user_limit=2)
    users = make_users(3)
    assert not isinstance(_buy(activity, users[0], 2), str)  # Redis's share: 3 - 2 = 1 left
    bought = _buy(activity, users[1], 2)
    assert not isinstance(bought, str) and bought.remaining == 1
    assert _buy(activity, users[2], 2) == "sold_out", "one unit left: two cannot be had"


def test_a_release_that_reached_only_the_database_is_brought_into_redis_by_the_next_run():
    """The database step committed, then Redis failed: Redis counts fewer units than the
    database (never more), and the next reconciliation adds them."""
    activity = make_activity(stock=4, db_reserve=2)
    users = make_users(3)
    assert all(not isinstance(_buy(activity, u), str) for u in users[:2])
    reservations_drain(activity_id=activity.pk)
    assert stock_reserve_release(activity_id=activity.pk) == 2  # the database step alone
    assert redis_remaining(activity.pk) == 0

    assert reconcile(activity_id=activity.pk)["actions"]["reserve_units_released"] == 2
    assert redis_remaining(activity.pk) == 2
    assert stock_redis().get(ActivityKeys(activity.pk).reserve) == b"0"
    assert not isinstance(_buy(activity, users[2]), str)
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report


def test_a_cancelled_database_path_order_joins_redis_share_and_the_reserve_never_grows():
    """A unit the database path sold comes back on sale through Redis (released to its
    share), so the reserve Redis counts is never below the database's."""
    activity = make_activity(stock=6, db_reserve=2)
    users = make_users(2)
    purchase_fallback(activity=activity_snapshot(activity.pk), user_id=users[0].pk, quantity=1)
    order = Order.objects.get(activity=activity, user=users[0])
    order_cancel(order=order, reason="shopper")
    stock = SeckillStock.objects.get(activity=activity)
    assert (stock.available, stock.reserve, stock.released) == (6, 1, 1)
    assert redis_remaining(activity.pk) == 5, "Redis's share 4, and the returned unit"
    assert stock_redis().get(ActivityKeys(activity.pk).reserve) == b"1", "down to the database's, never below"
    assert units_left_many([activity.pk]) == {activity.pk: 6}
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["reserve_drift"] == 0, report
    assert not isinstance(_buy(activity, users[1]), str)
