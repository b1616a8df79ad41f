"""The purchase script's own line of defence (DESIGN.md: it validates its arguments even
though the web process did): a caller that skipped gate 1 still cannot take more than
the per-user limit, nor a zero or negative quantity that would add stock."""

import pytest

from seckill.sale.selectors import redis_remaining
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import ScriptCode, run_purchase

from ..factories import make_activity, make_users

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("quantity,limit", [(2, 1), (4, 3), (0, 1), (-1, 1), (-5, 3)])
def test_a_quantity_outside_1_to_the_limit_is_invalid_and_takes_nothing(quantity, limit):
    activity = make_activity(stock=10, per_user_limit=limit)
    (user,) = make_users(1)
    keys = ActivityKeys(activity.pk)

    reply = run_purchase(stock_redis(), keys, user_id=user.pk, quantity=quantity, limit=limit)

    assert reply.code == ScriptCode.INVALID
    assert redis_remaining(activity.pk) == 10
    assert stock_redis().xlen(keys.log) == 0
    assert not stock_redis().hexists(keys.users, user.pk)
    # The same shopper may still buy within the limit.
    assert run_purchase(stock_redis(), keys, user_id=user.pk, quantity=1, limit=limit).code == ScriptCode.RESERVED
    assert redis_remaining(activity.pk) == 9
