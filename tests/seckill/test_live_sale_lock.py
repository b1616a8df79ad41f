"""A live sale is locked: once warmed or started, its start, price, stock, shards, per-user
limit and safety stock are read-only in admin and refused by the service, nothing changed in
the database or in Redis; the end may move later, never into the past; the order of a
reservation costs the price it was reserved at."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from inventory.models import SeckillStock
from orders.models import Order
from orders.services.creation import orders_create_from_reservations
from seckill.models import Activity
from seckill.sale import activities
from seckill.sale.activities import ActivityChangeRefused, activity_save
from stock.reservations import reservations_pending
from stock.scripts import ScriptCode

from ..factories import make_activity, make_users
from ..helpers import reserve, shard_stocks

LOCKED = ["start_at", "seckill_price", "total_stock", "shards", "per_user_limit", "safety_stock", "db_reserve"]

# A value each locked field could be changed to (admin form value, model value).
CHANGES = {
    "start_at": None,  # computed: an hour later
    "seckill_price": ("9.99", Decimal("9.99")),
    "total_stock": ("3", 3),
    "shards": ("2", 2),
    "per_user_limit": ("2", 2),
    "safety_stock": ("1", 1),
    "db_reserve": ("2", 2),
}


def live_sale(kind: str, **overrides):
    """A sale locked for ``kind``: "warmed" (warmed, starting in an hour) or "started" (live)."""
    return make_activity(stock=8, started=kind == "started", shards=4, **overrides)


def state(activity) -> tuple:
    """What a refused edit must leave alone: the row, the stock row and the Redis stock."""
    row = Activity.objects.values(*LOCKED, "end_at", "title", "status").get(pk=activity.pk)
    stored = Activity.objects.get(pk=activity.pk)
    stock = SeckillStock.objects.values_list("total", "available").get(activity=activity)
    return row, stock, shard_stocks(stored)


def split(moment) -> dict:
    local = timezone.localtime(moment)
    return {"0": local.strftime("%Y-%m-%d"), "1": local.strftime("%H:%M:%S")}


def change_form(activity, **overrides) -> dict:
    """The admin's change form as the page sends it, every field as stored, with ``overrides``."""
    data = {
        "title": activity.title,
        "product": activity.product_id,
        "seckill_price": str(activity.seckill_price),
        "total_stock": str(activity.total_stock),
        "safety_stock": str(activity.safety_stock),
        "db_reserve": str(activity.reserve_units),
        "shards": str(activity.shards),
        "per_user_limit": str(activity.per_user_limit),
        "pay_timeout": str(activity.pay_timeout),
        "stock-TOTAL_FORMS": "1",
        "stock-INITIAL_FORMS": "1",
        "stock-MIN_NUM_FORMS": "0",
        "stock-MAX_NUM_FORMS": "1",
        "stock-0-id": activity.stock.pk,
        "stock-0-activity": activity.pk,
    }
    for name in ("start_at", "end_at"):
        for part, value in split(getattr(activity, name)).items():
            data[f"{name}_{part}"] = value
    data.update(overrides)
    return data


def change_url(activity) -> str:
    return f"/admin/seckill/activity/{activity.pk}/change/"


def posted_change(activity, field: str) -> dict:
    if field == "start_at":
        return {f"start_at_{p}": v for p, v in split(activity.start_at + timedelta(hours=1)).items()}
    return {field: CHANGES[field][0]}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["warmed", "started"])
def test_the_locked_fields_are_read_only_in_admin(merchant, kind):
    activity = live_sale(kind)
    assert set(activities.activity_locked_fields(activity=activity)) == set(LOCKED)
    page = merchant.get(change_url(activity)).content.decode()
    for name in (
        "start_at_0",
        "seckill_price",
        "total_stock",
        "shards",
        "per_user_limit",
        "safety_stock",
        "db_reserve",
    ):
        assert f'name="{name}"' not in page, name
    assert 'name="end_at_0"' in page and 'name="title"' in page
    assert "locked once the stock is loaded" in page  # the help text says why


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("field", LOCKED)
@pytest.mark.parametrize("kind", ["warmed", "started"])
def test_a_posted_change_of_a_locked_field_is_refused_and_changes_nothing(merchant, kind, field):
    activity = live_sale(kind)
    before = state(activity)

    response = merchant.post(change_url(activity), change_form(activity, **posted_change(activity, field)))

    assert response.status_code == 200  # the form again, with the refusal
    page = response.content.decode()
    label = str(Activity._meta.get_field(field).verbose_name)
    assert "cannot change once the stock is loaded or the sale has started" in page and label in page, page[-3000:]
    assert state(activity) == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("field", LOCKED)
@pytest.mark.parametrize("kind", ["warmed", "started"])
def test_the_service_refuses_a_change_of_a_locked_field(kind, field):
    activity = live_sale(kind)
    before = state(activity)
    if field == "start_at":
        activity.start_at = activity.start_at + timedelta(hours=1)
    else:
        setattr(activity, field, CHANGES[field][1])
    activity.title = "Renamed"
    activity.end_at = activity.end_at + timedelta(hours=1)

    with pytest.raises(ActivityChangeRefused, match="cannot change once the stock is loaded or the sale has started"):
        activity_save(activity=activity)

    assert state(activity) == before  # nothing of the edit saved, not even the title


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["warmed", "started"])
def test_moving_the_start_of_a_live_sale_into_the_future_is_refused(kind):
    activity = live_sale(kind)
    activity.start_at = timezone.now() + timedelta(hours=3)
    activity.end_at = activity.start_at + timedelta(hours=1)
    with pytest.raises(ActivityChangeRefused, match="start"):
        activity_save(activity=activity)
    assert Activity.objects.get(pk=activity.pk).start_at < timezone.now() + timedelta(hours=2)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["warmed", "started"])
def test_the_end_of_a_live_sale_may_move_later_in_admin(merchant, kind):
    activity = live_sale(kind)
    later = activity.end_at + timedelta(hours=2)
    response = merchant.post(
        change_url(activity), change_form(activity, **{f"end_at_{p}": v for p, v in split(later).items()})
    )
    assert response.status_code == 302, response.content.decode()[-3000:]
    stored = Activity.objects.get(pk=activity.pk)
    assert stored.end_at == later.replace(microsecond=0)
    assert stored.status == Activity.Status.WARMED and shard_stocks(stored) == shard_stocks(activity)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["warmed", "started"])
def test_the_end_of_a_live_sale_cannot_move_into_the_past(merchant, kind):
    activity = live_sale(kind)
    before = state(activity)
    past = timezone.now() - timedelta(seconds=2)
    data = change_form(activity, **{f"end_at_{p}": v for p, v in split(past).items()})
    response = merchant.post(change_url(activity), data)
    assert response.status_code == 200
    assert "The end cannot move into the past" in response.content.decode()
    assert state(activity) == before

    activity.end_at = past
    with pytest.raises(ActivityChangeRefused, match="end cannot move into the past"):
        activity_save(activity=activity)
    assert state(activity) == before


@pytest.mark.django_db(transaction=True)  # a relayout would run on commit
def test_a_shard_change_after_the_warm_up_is_refused_before_anything_is_committed():
    activity = make_activity(stock=16, started=False, shards=8)
    assert activity.status == Activity.Status.WARMED
    before = state(activity)
    activity.shards = 1

    with pytest.raises(ActivityChangeRefused, match="stock counters"):
        activity_save(activity=activity)

    assert state(activity) == before
    assert shard_stocks(Activity.objects.get(pk=activity.pk)) == [2] * 8


@pytest.mark.django_db(transaction=True)
def test_a_price_edit_mid_sale_does_not_change_what_the_next_order_costs(merchant):
    activity = make_activity(stock=5, seckill_price=Decimal("1.00"))
    first, second = make_users(2)
    assert reserve(activity, first.pk).code == ScriptCode.RESERVED

    merchant.post(change_url(activity), change_form(activity, seckill_price="0.01"))
    edited = Activity.objects.get(pk=activity.pk)
    edited.seckill_price = Decimal("0.01")
    with pytest.raises(ActivityChangeRefused):
        activity_save(activity=edited)
    assert reserve(activity, second.pk).code == ScriptCode.RESERVED

    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk))
    amounts = sorted(Order.objects.filter(activity=activity).values_list("amount", flat=True))
    assert amounts == [Decimal("1.00"), Decimal("1.00")]


@pytest.mark.django_db(transaction=True)
def test_a_scheduled_sale_not_yet_warmed_stays_editable(merchant):
    activity = make_activity(stock=10, started=False, warm=False, shards=4)
    assert activities.activity_locked_fields(activity=activity) == {}
    later = activity.start_at + timedelta(minutes=30)
    data = change_form(
        activity,
        seckill_price="2.50",
        total_stock="6",
        shards="2",
        per_user_limit="2",
        safety_stock="1",
        **{f"start_at_{p}": v for p, v in split(later).items()},
    )
    response = merchant.post(change_url(activity), data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    stored = Activity.objects.get(pk=activity.pk)
    assert (stored.seckill_price, stored.total_stock, stored.shards, stored.per_user_limit, stored.safety_stock) == (
        Decimal("2.50"),
        6,
        2,
        2,
        1,
    )
    assert stored.start_at == later.replace(microsecond=0)
    assert SeckillStock.objects.get(activity=activity).total == 6
