"""The process's memories of a script's answer ("sold out", "taken part") last their bound
counted from when Redis was asked, not from when a busy process gets round to remembering:
a CI run on a loaded machine answered 409 duplicate 1.55 s after the shopper's order had
expired (tests/promises/test_honest_answers.py, one-key-cancels-expiries), past the 1 s bound."""

import time

import pytest

from core.errors import ApiError
from seckill.purchase.reserve import purchase_reserve
from seckill.purchase.took_part import took_part_forget, took_part_known, took_part_remember
from seckill.sale.snapshot import activity_snapshot
from seckill.sale.soldout import sold_out_forget, sold_out_known, sold_out_remember
from stock.layout import StockLayout

from ..factories import make_activity, make_users


def test_a_fact_older_than_its_bound_is_not_remembered(settings):
    settings.SECKILL_DUPLICATE_TTL = 1.0
    settings.SECKILL_SOLD_OUT_TTL = 1.0
    asked = time.monotonic() - 1.5  # the script answered 1.5 s ago; the process is late
    took_part_remember(9301, 7, since=asked)
    sold_out_remember(9301, since=asked)
    assert not took_part_known(9301, 7)
    assert not sold_out_known(9301)


def test_a_fresh_fact_is_remembered_for_what_is_left_of_its_bound(settings):
    settings.SECKILL_DUPLICATE_TTL = 1.0
    settings.SECKILL_SOLD_OUT_TTL = 1.0
    try:
        took_part_remember(9302, 7, since=time.monotonic())
        sold_out_remember(9302, since=time.monotonic())
        assert took_part_known(9302, 7)
        assert sold_out_known(9302)
    finally:
        took_part_forget(9302, 7)
        sold_out_forget(9302)


@pytest.mark.django_db(transaction=True)
def test_a_purchase_late_to_remember_keeps_no_stale_fact(settings, monkeypatch):
    """The real purchase, its process stalled after Redis answered and before it remembers
    (as a loaded machine does): the answers are older than their 1 s bound when the process
    gets to them, so neither "taken part" nor "sold out" may be remembered."""
    settings.SECKILL_DUPLICATE_TTL = 1.0
    settings.SECKILL_SOLD_OUT_TTL = 1.0
    activity = make_activity(stock=1)
    buyer, late = make_users(2, prefix="late-memory")
    snapshot = activity_snapshot(activity.pk)
    asking_redis = StockLayout.reserve

    def reserve_then_stall(self, *args, **kwargs):
        reply = asking_redis(self, *args, **kwargs)
        time.sleep(1.2)  # the stall under test: the process is busy after Redis answered
        return reply

    monkeypatch.setattr(StockLayout, "reserve", reserve_then_stall)
    try:
        purchase_reserve(activity=snapshot, user_id=buyer.pk, quantity=1)  # the last unit
        assert not took_part_known(activity.pk, buyer.pk)
        with pytest.raises(ApiError) as refused:
            purchase_reserve(activity=snapshot, user_id=late.pk, quantity=1)
        assert refused.value.code == "sold_out"
        assert not sold_out_known(activity.pk)
    finally:
        took_part_forget(activity.pk, buyer.pk)
        sold_out_forget(activity.pk)
