"""With S > 3 shards a purchase tries three at random; before it answers "sold out" it looks
at the others, so no shopper is told sold out while a shard still holds units."""

import pytest

from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import ScriptCode
from tests.factories import make_activity, make_users

pytestmark = pytest.mark.django_db(transaction=True)


def test_no_sold_out_while_an_untried_shard_holds_units():
    activity = make_activity(stock=40, shards=8, per_user_limit=1)
    layout, client = StockLayout(activity.pk, 8), stock_redis()
    # Everything left sits in one shard (as a run of purchases and returns can leave it).
    for i, shard in enumerate(layout.shard_keys):
        client.set(shard.stock, 5 if i == 7 else 0)
    codes = [
        layout.reserve(client, user_id=user.pk, quantity=1, limit=1).code for user in make_users(5, prefix="untried")
    ]
    assert codes == [ScriptCode.RESERVED] * 5, codes
    assert layout.totals(client)[0] == 0
    # Now it is sold out, and says so.
    (late,) = make_users(1, prefix="late")
    assert layout.reserve(client, user_id=late.pk, quantity=1, limit=1).code == ScriptCode.SOLD_OUT
