"""A reservation the database guard refuses frees its shopper but puts no unit back into
Redis: a unit the database does not have is never sold again (no phantom units)."""

import pytest
from django.db.models import F

from inventory.models import SeckillStock
from orders.models import AnomalyOrder, Order
from seckill.purchase.result import purchase_result
from seckill.sale.replay import reservations_drain
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import ScriptCode
from tests.factories import make_activity, make_users
from tests.helpers import assert_identity

pytestmark = pytest.mark.django_db(transaction=True)


def _wave(activity, users) -> dict[int, int]:
    """Each shopper's purchase script answer, then the drain turns reservations into orders."""
    layout = StockLayout(activity.pk, activity.shards)
    codes = {}
    for user in users:
        codes[user.pk] = layout.reserve(stock_redis(), user_id=user.pk, quantity=1, limit=1).code
    reservations_drain(activity_id=activity.pk)
    return codes


@pytest.mark.parametrize("shards", [1, 4], ids=["one-key", "4-shards"])
def test_units_the_database_lacks_are_not_sold_again(shards):
    activity = make_activity(stock=10, shards=shards)
    # Drift: the database holds 3 units fewer than Redis was loaded with.
    SeckillStock.objects.filter(activity=activity).update(available=F("available") - 3, total=F("total") - 3)
    first = make_users(20, prefix=f"first{shards}-")
    codes = _wave(activity, first)
    reserved = [u for u in first if codes[u.pk] == ScriptCode.RESERVED]
    assert len(reserved) == 10
    assert Order.objects.filter(activity=activity).count() == 7
    refused = AnomalyOrder.objects.filter(activity=activity, kind=AnomalyOrder.Kind.DB_GUARD_FAILED)
    assert refused.count() == 3
    # Each refused shopper can read why.
    failed = [u for u in reserved if purchase_result(activity_id=activity.pk, user_id=u.pk)[0] == "failed"]
    assert len(failed) == 3
    # The refused units did not go back: nothing is left to sell.
    assert StockLayout(activity.pk, shards).totals(stock_redis())[0] == 0

    second = make_users(20, prefix=f"second{shards}-")
    codes = _wave(activity, second)
    assert all(code == ScriptCode.SOLD_OUT for code in codes.values()), codes
    assert refused.count() == 3, "no new 202-then-failed"
    assert Order.objects.filter(activity=activity).count() == 7
    assert_identity(activity)
