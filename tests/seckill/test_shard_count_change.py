"""Changing an activity's shard count (Activity.shards): allowed until a minute before the
start while the sale is not warmed and no order exists, the warm-up then lays the stock out
over the new count, with no unit left in a key the purchase no longer reads; refused
otherwise, before anything is written, in the service and in the admin alike."""

from datetime import timedelta

import pytest
from django.utils import timezone

from seckill.models import Activity
from seckill.sale.activities import ActivityChangeRefused, activity_save
from seckill.sale.lifecycle import activity_warmup
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_snapshot_forget
from stock.keys import USER_PARTITIONS, ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import ScriptCode

from ..factories import make_activity, make_users
from ..helpers import assert_identity, form_data, reserve, shard_stocks


def stock_keys_left(activity_id: int, shards: int) -> list[str]:
    """Keys of a layout of ``shards`` shards that still exist (S > 1: partitions too)."""
    keys = ActivityKeys(activity_id)
    parts = keys.shards(shards)
    if shards > 1:
        parts += [keys.partition(p) for p in range(USER_PARTITIONS)]
    client = stock_redis()
    return [name for part in parts for name in (part.stock, part.loaded, part.users) if client.exists(name)]


def open_sale(activity) -> None:
    """The start arrives (the test cannot wait a minute)."""
    Activity.objects.filter(pk=activity.pk).update(start_at=timezone.now() - timedelta(seconds=1))
    activity_snapshot_forget(activity.pk)
    activity.refresh_from_db()


def sell_out(activity, users) -> list[int]:
    return [reserve(activity, u.pk).code for u in users]


@pytest.mark.django_db(transaction=True)  # the old layout's keys go on commit
def test_8_to_1_shard_before_the_warm_up_lays_every_unit_in_the_single_key():
    activity = make_activity(stock=40, started=False, warm=False, shards=8)
    activity.shards = 1

    activity_save(activity=activity)
    activity_warmup(activity_id=activity.pk)

    activity.refresh_from_db()
    assert activity.status == Activity.Status.WARMED
    assert shard_stocks(activity) == [40]
    assert redis_remaining(activity.pk) == 40
    open_sale(activity)
    codes = sell_out(activity, make_users(41))
    assert codes == [ScriptCode.RESERVED] * 40 + [ScriptCode.SOLD_OUT]
    assert_identity(activity)


@pytest.mark.django_db(transaction=True)
def test_1_to_8_shards_before_the_warm_up_warms_every_new_shard():
    activity = make_activity(stock=16, started=False, warm=False)
    activity.shards = 8

    activity_save(activity=activity)
    activity_warmup(activity_id=activity.pk)

    activity.refresh_from_db()
    assert activity.status == Activity.Status.WARMED
    assert shard_stocks(activity) == [2] * 8
    assert redis_remaining(activity.pk) == 16
    open_sale(activity)
    codes = sell_out(activity, make_users(16))
    # Never "not warmed"; the known limit of three tries may leave a unit for later buyers.
    assert ScriptCode.NOT_WARMED not in codes
    assert sum(shard_stocks(activity)) == 16 - codes.count(ScriptCode.RESERVED)
    assert_identity(activity)


@pytest.mark.django_db(transaction=True)
def test_a_shard_change_removes_the_keys_a_failed_warm_up_left_in_the_old_layout():
    activity = make_activity(stock=40, started=False, shards=8)
    # The warm-up wrote the shards but did not finish: the activity is not warmed.
    Activity.objects.filter(pk=activity.pk).update(status=Activity.Status.SCHEDULED)
    activity.refresh_from_db()
    activity.shards = 1

    activity_save(activity=activity)

    assert stock_keys_left(activity.pk, 8) == []  # no unit left in a key the purchase no longer reads
    activity_warmup(activity_id=activity.pk)
    activity.refresh_from_db()
    assert shard_stocks(activity) == [40]
    assert stock_keys_left(activity.pk, 8) == [ActivityKeys(activity.pk).stock, ActivityKeys(activity.pk).loaded]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("start_in", "warm", "refusal"),
    [
        (timedelta(seconds=-5), True, "stock counters cannot change once the stock is loaded or the sale has started"),
        (timedelta(hours=1), True, "stock counters cannot change once the stock is loaded or the sale has started"),
        (timedelta(seconds=30), False, "stock counters stays 8"),
    ],
    ids=["started", "warmed", "too_close"],
)
def test_the_service_refuses_a_shard_change_once_the_sale_is_warmed_or_about_to_start(start_in, warm, refusal):
    activity = make_activity(stock=16, shards=8, start_at=timezone.now() + start_in, warm=warm)
    keys_before = stock_keys_left(activity.pk, 8)
    activity.shards = 1
    activity.title = "Renamed"

    with pytest.raises(ActivityChangeRefused, match=refusal):
        activity_save(activity=activity)

    stored = Activity.objects.get(pk=activity.pk)
    assert (stored.shards, stored.title) == (8, "Test sale")  # nothing saved
    assert stock_keys_left(activity.pk, 8) == keys_before  # and nothing removed after


@pytest.mark.django_db(transaction=True)
def test_the_service_refuses_to_move_the_start_close_with_a_shard_change():
    activity = make_activity(stock=16, started=False, warm=False, shards=8)
    activity.shards = 2
    activity.start_at = timezone.now() + timedelta(seconds=10)
    with pytest.raises(ActivityChangeRefused, match="stock counters stays 8"):
        activity_save(activity=activity)
    assert Activity.objects.get(pk=activity.pk).shards == 8


def change_form(activity, **overrides) -> dict:
    return form_data(
        title=activity.title,
        product=activity.product_id,
        total_stock=str(activity.total_stock),
        safety_stock=str(activity.safety_stock),
        per_user_limit=str(activity.per_user_limit),
        **{"stock-TOTAL_FORMS": "1", "stock-INITIAL_FORMS": "1", "stock-0-id": activity.stock.pk},
        **{"stock-0-activity": activity.pk},
        **overrides,
    )


@pytest.mark.django_db(transaction=True)
def test_admin_changes_the_shards_of_an_upcoming_sale_not_yet_warmed(merchant):
    activity = make_activity(stock=40, started=False, warm=False, shards=8)
    url = f"/admin/seckill/activity/{activity.pk}/change/"
    page = merchant.get(url).content.decode()
    assert 'name="shards"' in page and "seconds before the start" in page

    response = merchant.post(url, change_form(activity, shards="1"))

    assert response.status_code == 302, response.content.decode()[-3000:]
    activity.refresh_from_db()
    assert (activity.shards, activity.status) == (1, Activity.Status.SCHEDULED)
    activity_warmup(activity_id=activity.pk)
    assert shard_stocks(activity) == [40]


@pytest.mark.django_db(transaction=True)
def test_admin_shows_the_shards_read_only_once_the_start_is_near(merchant):
    near = make_activity(stock=16, shards=8, warm=False, start_at=timezone.now() + timedelta(seconds=30))
    url = f"/admin/seckill/activity/{near.pk}/change/"
    page = merchant.get(url).content.decode()
    assert 'name="shards"' not in page and 'name="total_stock"' in page

    # A page opened earlier still posts a shard count: refused aloud, nothing saved.
    response = merchant.post(url, change_form(near, shards="1"))
    assert response.status_code == 200 and "stock counters stays 8" in response.content.decode()
    near.refresh_from_db()
    assert near.shards == 8

    for locked in (make_activity(stock=16, shards=8), make_activity(stock=16, shards=8, started=False)):
        page = merchant.get(f"/admin/seckill/activity/{locked.pk}/change/").content.decode()
        assert 'name="shards"' not in page


@pytest.mark.django_db(transaction=True)
def test_admin_refuses_a_shard_change_with_a_start_moved_close(merchant):
    activity = make_activity(stock=16, started=False, warm=False, shards=8)
    soon = timezone.localtime(timezone.now() + timedelta(seconds=10))
    data = change_form(activity, shards="2", start_at_0=soon.strftime("%Y-%m-%d"), start_at_1=soon.strftime("%H:%M:%S"))
    response = merchant.post(f"/admin/seckill/activity/{activity.pk}/change/", data)
    assert response.status_code == 200 and "stock counters stays 8" in response.content.decode()
    stored = Activity.objects.get(pk=activity.pk)
    assert (stored.shards, stored.start_at) == (8, activity.start_at)
