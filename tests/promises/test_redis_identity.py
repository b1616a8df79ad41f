"""The stock Redis's identity: a warm-up records which Redis state it wrote (an epoch
beside the stock, the server's run and replication ids); a Redis that is not that state
any more (a restore, a failover, a flush) is noticed and the stock derived again before
anything more is sold. A Redis that may evict keys or keeps nothing on disk is refused."""

import pytest
from django.test import override_settings

from orders.models import Order
from seckill.models import Activity
from seckill.sale.lifecycle import WarmupError, activity_identity_check, activity_warmup, stock_redis_refusal
from seckill.sale.replay import reservations_drain
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from tests.factories import make_activity, make_users
from tests.helpers import assert_identity

pytestmark = pytest.mark.django_db(transaction=True)


def _buy(activity, users) -> None:
    layout = StockLayout(activity.pk, activity.shards)
    for user in users:
        layout.reserve(stock_redis(), user_id=user.pk, quantity=1, limit=1)
    reservations_drain(activity_id=activity.pk)


@pytest.mark.parametrize("shards", [1, 4], ids=["one-key", "4-shards"])
def test_a_restore_of_an_earlier_state_is_noticed_and_the_stock_derived_again(shards):
    activity = make_activity(stock=10, shards=shards)
    client, layout = stock_redis(), StockLayout(activity.pk, shards)
    keys = [k for part in layout.stock_keys() for k in part.all()]
    saved = {k: client.dump(k) for k in keys if client.exists(k)}  # a backup taken now
    activity_warmup(activity_id=activity.pk, force=True)  # a re-warm after the backup
    _buy(activity, make_users(3, prefix=f"early{shards}-"))
    assert Order.objects.filter(activity=activity).count() == 3
    # The operator restores the backup: Redis counts the 3 sold units again.
    for k in keys:
        client.delete(k)
    for k, value in saved.items():
        client.restore(k, 0, value, replace=True)
    assert layout.totals(client)[0] == 10

    differences = activity_identity_check(activity_id=activity.pk)

    assert differences and "epoch" in differences[0]
    assert layout.totals(client)[0] == 7
    _buy(activity, make_users(10, prefix=f"late{shards}-"))
    assert Order.objects.filter(activity=activity).count() == 10  # every unit once, none twice
    assert activity_identity_check(activity_id=activity.pk) == []
    assert_identity(activity)


def test_another_server_than_the_one_warmed_is_noticed():
    """A failover promotes a replica: another run id and replication id hold the stock."""
    activity = make_activity(stock=5)
    recorded = Activity.objects.get(pk=activity.pk).redis_identity
    assert recorded["servers"] and recorded["epochs"][0]
    moved = {**recorded, "servers": ["0" * 40 + ":" + "1" * 40]}
    Activity.objects.filter(pk=activity.pk).update(redis_identity=moved)

    differences = activity_identity_check(activity_id=activity.pk)

    assert differences and "server" in differences[0]
    fresh = Activity.objects.get(pk=activity.pk).redis_identity
    assert fresh["servers"] == recorded["servers"] and fresh["epochs"] != recorded["epochs"]
    assert StockLayout(activity.pk).totals(stock_redis())[0] == 5


@pytest.fixture
def evicting_redis():
    """The test's own stock Redis, set to evict keys for the length of the test."""
    client = stock_redis()
    before = client.config_get("maxmemory-policy")["maxmemory-policy"]
    client.config_set("maxmemory-policy", "allkeys-lru")
    yield
    client.config_set("maxmemory-policy", before)


@override_settings(SECKILL_ALLOW_VOLATILE_REDIS=False)
def test_warm_up_and_start_up_refuse_a_redis_that_may_evict_keys(evicting_redis):
    activity = make_activity(stock=5, warm=False)
    with pytest.raises(WarmupError, match=r"maxmemory-policy is allkeys-lru.*SECKILL_ALLOW_VOLATILE_REDIS=true"):
        activity_warmup(activity_id=activity.pk)
    assert StockLayout(activity.pk).totals(stock_redis()) == (None, None)
    assert "SECKILL_ALLOW_VOLATILE_REDIS" in (stock_redis_refusal() or "")


def test_the_volatile_check_can_be_turned_off_for_tests_and_benchmarks(evicting_redis):
    activity = make_activity(stock=5, warm=False)
    assert activity_warmup(activity_id=activity.pk).remaining == 5
    assert stock_redis_refusal() is None
