"""Stock moves exactly once, whichever of the paths that may move it gets there first.

Each test here pins an invariant that a mutation of the code (a dropped condition in a
Lua script or a conditional UPDATE) once broke without any other test noticing.
"""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from inventory.models import SeckillStock, StockMovement
from inventory.services import InsufficientStock, Share, stock_return
from orders.models import AnomalyOrder, Order
from orders.services.lifecycle import order_cancel, orders_units_return
from seckill.models import Activity
from seckill.sale.lifecycle import WarmupError, activity_close, activity_warmup
from seckill.sale.reconciliation import reconcile
from seckill.sale.replay import reservations_replay
from seckill.sale.selectors import redis_remaining
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import wait_until
from .helpers import buy, reserve

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cancelled_orders_units_return_to_redis_once_whoever_returns_them():
    """The cancel's own hook returns the units; reconciliation (which may have measured
    before the hook ran) and a retried hook must then return nothing more."""
    activity = make_activity(stock=5)
    users = make_users(2)
    order, _ = buy(activity, users)
    assert redis_remaining(activity.pk) == 3

    order_cancel(order=order, reason="shopper")
    assert redis_remaining(activity.pk) == 4

    cancelled = Order.objects.get(pk=order.pk)
    assert orders_units_return(orders=[cancelled]) == 0
    assert redis_remaining(activity.pk) == 4
    assert stock_redis().smembers(ActivityKeys(activity.pk).returned) == {order.order_no.encode()}
    assert SeckillStock.objects.get(activity=activity).available == 4
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
    assert report["buckets"]["cancelled_not_returned"] == 0


def test_close_keeps_every_key_while_a_reservation_is_still_without_an_order(settings):
    """A reservation the drain could not turn into an order yet (here: one that fails and
    is below the attempt limit) must survive the close: removing the keys would lose it."""
    settings.SECKILL_REPLAY_MAX_ATTEMPTS = 10
    now = timezone.now()
    activity = make_activity(stock=5, start_at=now - timedelta(seconds=30), end_at=now + timedelta(seconds=1))
    doomed, good = make_users(2)
    stuck = reserve(activity, doomed)
    reserve(activity, good)
    doomed.delete()  # the order insert now fails on the foreign key, attempt after attempt
    settled = activity.end_at + timedelta(seconds=settings.SECKILL_ACTIVITY_CACHE_TTL + 1)
    wait_until(lambda: timezone.now() > settled, timeout=60, what="the sale to end and settle")

    with pytest.raises(WarmupError):
        activity_close(activity_id=activity.pk)

    keys = ActivityKeys(activity.pk)
    assert [e for e, _ in stock_redis().xrange(keys.log)] == [stuck.reservation_id.encode()]
    assert redis_remaining(activity.pk) == 3
    assert Activity.objects.get(pk=activity.pk).status == Activity.Status.WARMED
    assert Order.objects.filter(activity=activity).count() == 1  # the good one was drained
    assert not AnomalyOrder.objects.filter(activity=activity).exists()


def test_the_database_never_takes_back_more_than_it_sold():
    """The stock row's own guard (available + units <= total): a second return of the
    same units, by any path that skipped the order's status check, writes nothing."""
    activity = make_activity(stock=3)
    (order,) = buy(activity, make_users(1))
    order_cancel(order=order, reason="shopper")
    stock = SeckillStock.objects.get(activity=activity)
    assert stock.available == stock.total == 3
    ledger = StockMovement.objects.filter(activity=activity).count()

    with pytest.raises(InsufficientStock), transaction.atomic():
        stock_return(
            activity_id=activity.pk, orders=[Order.objects.get(pk=order.pk)], share=Share.REDIS, reason="again"
        )

    stock.refresh_from_db()
    assert (stock.available, stock.total) == (3, 3)
    assert StockMovement.objects.filter(activity=activity).count() == ledger


def test_after_redis_restarts_empty_reconciliation_does_not_return_earlier_cancels_again():
    """The returned set died with Redis: the re-warm derives the stock without the units
    of the cancelled order and returns them itself (recording it in the new set), so
    reconciliation finds nothing to return again."""
    activity = make_activity(stock=5)
    cancelled, kept = buy(activity, make_users(2))
    order_cancel(order=cancelled, reason="shopper")
    assert redis_remaining(activity.pk) == 4

    stock_redis().flushdb()  # Redis restarted empty
    activity_warmup(activity_id=activity.pk, force=True)
    assert redis_remaining(activity.pk) == 4

    report = reconcile(activity_id=activity.pk)
    assert report["buckets"]["cancelled_not_returned"] == 0, report
    assert report["identity_ok"], report
    assert redis_remaining(activity.pk) == 4
    assert Order.objects.get(pk=kept.pk).status == Order.Status.PENDING


def test_units_given_back_while_the_stock_key_is_missing_never_fake_a_warm_up(settings):
    """Redis lost the stock key (restarted, or cleaned up): a cancel's return or a
    reservation's release must not create it holding just the returned units, or the
    sale would look warmed and sell out at once instead of answering "busy" until the
    re-warm derives the real figure (DESIGN.md: a missing key never reads as sold out)."""
    settings.SECKILL_REPLAY_MAX_ATTEMPTS = 1
    activity = make_activity(stock=5)
    buyer, doomed = make_users(2)
    (order,) = buy(activity, [buyer])
    reserve(activity, doomed)
    doomed.delete()  # its reservation can never become an order: the replay releases it
    keys = ActivityKeys(activity.pk)
    stock_redis().delete(keys.stock)

    order_cancel(order=order, reason="shopper")

    assert reservations_replay(activity_id=activity.pk, grace_seconds=0).released == 1

    assert redis_remaining(activity.pk) is None
    assert stock_redis().xlen(keys.log) == 0
    activity_warmup(activity_id=activity.pk, force=True)
    assert redis_remaining(activity.pk) == 5  # derived from the database, every unit back
