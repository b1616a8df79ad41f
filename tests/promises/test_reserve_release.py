"""The database reserve is not stock kept back for ever: once Redis's share has sold out,
what is left of the reserve joins it (reconciliation, every SECKILL_RECONCILE_INTERVAL),
so every unit of the sale is sold, each once."""

import pytest

from core.errors import ApiError
from inventory.models import SeckillStock
from inventory.services import stock_reserve_release
from orders.models import Order
from seckill.fallback import purchase_fallback
from seckill.purchase import purchase_reserve
from seckill.reconciliation import reconcile
from seckill.replay import reservations_drain
from seckill.selectors import activity_snapshot, redis_remaining

from ..factories import make_activity, make_users

pytestmark = pytest.mark.django_db(transaction=True)


def _buy(activity, user):
    try:
        return purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    except ApiError as exc:
        return exc.code


@pytest.mark.parametrize("shards", [1, 4])
def test_the_reserve_joins_redis_once_redis_sold_out_and_every_unit_sells_once(shards):
    activity = make_activity(stock=8, db_reserve=3, shards=shards)
    users = make_users(10)
    assert redis_remaining(activity.pk) == 5
    assert all(not isinstance(_buy(activity, u), str) for u in users[:5])
    assert _buy(activity, users[5]) == "sold_out"
    reservations_drain(activity_id=activity.pk)

    report = reconcile(activity_id=activity.pk)
    assert report["actions"]["reserve_units_released"] == 3 and report["identity_ok"], report
    assert redis_remaining(activity.pk) == 3
    assert reconcile(activity_id=activity.pk)["actions"]["reserve_units_released"] == 0, "once"
    with pytest.raises(ApiError) as refused:  # the database path has nothing left to sell
        purchase_fallback(activity=activity_snapshot(activity.pk), user_id=users[9].pk, quantity=1)
    assert refused.value.code == "busy"

    assert all(not isinstance(_buy(activity, u), str) for u in users[5:8])
    assert _buy(activity, users[8]) == "sold_out"
    reservations_drain(activity_id=activity.pk)
    assert Order.objects.filter(activity=activity).count() == 8
    stock = SeckillStock.objects.get(activity=activity)
    assert (stock.available, stock.reserve, stock.released) == (0, 0, 3)
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["reserve_drift"] == 0, report


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
    assert not isinstance(_buy(activity, users[2]), str)
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
