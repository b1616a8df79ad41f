"""A sharded re-warm never counts more units than exist: every shard is frozen (its stock
key removed, so purchases answer busy) before any new share is written; a round that loses
a race leaves shards frozen, never a mix of old and new figures."""

import pytest
from django.conf import settings

from seckill.sale.lifecycle import activity_warmup
from seckill.sale.reconciliation import reconciliation_measure
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import SHARD_PURCHASE
from tests.factories import make_activity, make_users
from tests.helpers import assert_identity, shard_stocks

pytestmark = pytest.mark.django_db(transaction=True)


def _counted(activity) -> int:
    return sum(s for s in shard_stocks(activity) if s is not None)


def test_a_rewarm_round_that_loses_a_race_never_over_counts():
    activity = make_activity(stock=20, shards=4)
    layout, client = StockLayout(activity.pk, 4), stock_redis()
    # The truth, 20 units, all in the last shard (as purchases and returns can leave it).
    for i, count in enumerate([0, 0, 0, 20]):
        client.set(layout.keys.shard(i).stock, count)
    picture = reconciliation_measure(activity_id=activity.pk).redis
    assert picture.shard_stocks == (0, 0, 0, 20)
    # A shopper buys from shard 3 after the picture was taken, before the re-warm writes.
    (user,) = make_users(1)
    shard = layout.keys.shard(3)
    SHARD_PURCHASE(
        keys=[shard.stock, shard.log, shard.drain],
        args=[user.pk, 1, 1, 3, settings.SECKILL_DRAIN_KICK_TTL_MS],
        client=client,
    )

    written = layout.warm(
        client, picture=picture, remaining=20, loaded=activity.redis_loaded_units, reserve=0, handed=0
    )

    assert not written
    assert _counted(activity) <= 19, shard_stocks(activity)  # 20 units, one reserved
    # The next round, from a fresh picture, writes every share.
    result = activity_warmup(activity_id=activity.pk, force=True)
    assert result.remaining == 19 and _counted(activity) == 19
    assert None not in shard_stocks(activity)
    assert_identity(activity)
