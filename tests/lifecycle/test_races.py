"""Races of the stock lifecycle: each test drives the real services in the racy order
(or races them with real threads) and asserts the identities of DESIGN.md.

A  a reservation given back (replay gave up, refused, returned by staff) and a late or
   concurrent consumer of the same reservation;
B  a forced re-warm between a cancel's commit and its Redis return;
C  the participants a re-warm writes while shoppers cancel and buy again;
E  closing an activity while it is being re-warmed.
"""

import random
import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from inventory.models import SeckillStock
from orders.models import AnomalyOrder, Order, ReleasedReservation
from orders.services.creation import orders_create_from_reservations, reservation_give_up
from orders.services.lifecycle import order_cancel
from orders.tasks import order_create_task
from seckill.models import Activity
from seckill.sale.lifecycle import WarmupError, WarmupResult, activity_close, activity_warmup
from seckill.sale.reconciliation import reconcile
from seckill.sale.replay import reservations_drain, reservations_replay
from seckill.sale.selectors import redis_remaining
from stock.keys import USER_PARTITIONS, ActivityKeys, claim_value
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending
from stock.scripts import LogEntry, ScriptCode

from ..factories import make_activity, make_users
from ..helpers import shopping_while_rewarming, wait_until
from .helpers import buy, reserve

pytestmark = pytest.mark.django_db(transaction=True)


def reserve_on_shards(activity, user) -> LogEntry | None:
    """The purchase in Redis for any S (a claim, then a shard, when S > 1); None if refused."""
    reply = StockLayout(activity.pk, activity.shards).reserve(stock_redis(), user_id=user.pk, quantity=1, limit=1)
    if reply.code != ScriptCode.RESERVED:
        return None
    return LogEntry(reply.reservation_id, user.pk, 1, reply.shard)


def participants_in_redis(activity) -> dict[int, str]:
    """The participant records: the users hash, or (S > 1) every user partition's claims."""
    keys, client = ActivityKeys(activity.pk), stock_redis()
    hashes = [keys] if activity.shards == 1 else [keys.partition(p) for p in range(USER_PARTITIONS)]
    return {int(u): v.decode() for h in hashes for u, v in client.hgetall(h.users).items()}


def assert_units_counted_once(activity) -> None:
    """Every unit is in exactly one place: Redis stock, a reservation, or a live order."""
    live = Order.objects.filter(activity=activity, status__in=Order.LIVE_STATUSES)
    live_units = live.aggregate(u=Sum("quantity"))["u"] or 0
    assert live.values("user").distinct().count() == live.count(), "a shopper holds two live orders"
    stock = SeckillStock.objects.get(activity=activity)
    assert stock.available == stock.total - live_units
    logged = sum(e.quantity for e in reservations_pending(activity_id=activity.pk))
    assert redis_remaining(activity.pk) + logged + live_units == activity.redis_loaded_units
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report


# --- A: a reservation given back never becomes an order as well --------------------------


def test_a_late_order_task_for_a_reservation_the_replay_gave_up_creates_no_order(settings):
    """The replay gave up on a reservation (its order insert kept failing) and returned
    its unit to Redis; then the cause went away and a late or redelivered order task for
    the same reservation ran. That task must not make an order: the unit is on sale again."""
    settings.SECKILL_REPLAY_MAX_ATTEMPTS = 1
    activity = make_activity(stock=3)
    (shopper,) = make_users(1)
    entry = reserve(activity, shopper)
    User = get_user_model()
    pk, username = shopper.pk, shopper.username
    shopper.delete()  # the insert fails on the foreign key while the row is gone
    assert reservations_replay(activity_id=activity.pk, grace_seconds=0).released == 1
    assert redis_remaining(activity.pk) == 3
    User.objects.create(pk=pk, username=username)  # the cause goes away

    order_create_task(activity.pk, entry.reservation_id, entry.user_id, entry.quantity, entry.shard)

    assert not Order.objects.filter(activity=activity).exists()
    assert redis_remaining(activity.pk) == 3
    assert SeckillStock.objects.get(activity=activity).available == 3
    assert_units_counted_once(activity)


def test_a_reservation_the_guard_refused_stays_refused_when_a_cancel_frees_a_unit_before_a_second_consumer():
    """Two consumers of the same reservation (a task delivered twice) across a guard
    failure and a concurrent cancel: the first finds no unit in the database and gives
    the reservation up (the shopper's result says failed); a cancel then puts a unit back;
    the second consumer must not turn the refused reservation into an order (its shopper
    was told it failed, and the unit belongs to whoever buys it next)."""
    activity = make_activity(stock=3)
    first, second, late = make_users(3)
    orders = buy(activity, [first, second])
    entry = reserve(activity, late)
    SeckillStock.objects.filter(activity=activity).update(available=0, total=2)  # a unit the database lacks

    assert orders_create_from_reservations(activity_id=activity.pk, entries=[entry]).released == [entry.reservation_id]
    order_cancel(order=orders[0], reason="shopper")  # a unit back in the database
    assert SeckillStock.objects.get(activity=activity).available == 1
    order_create_task(activity.pk, entry.reservation_id, entry.user_id, entry.quantity, entry.shard)  # the second

    assert not Order.objects.filter(activity=activity, user=late).exists()
    assert ReleasedReservation.objects.filter(activity=activity, reservation_id=entry.reservation_id).exists()
    from seckill.purchase.result import purchase_result

    assert purchase_result(activity_id=activity.pk, user_id=late.pk)[0] == "failed"
    assert SeckillStock.objects.get(activity=activity).available == 1
    report = reconcile(activity_id=activity.pk)
    assert report["db_drift"] == 0 and report["redis_drift"] == 0, report


@pytest.mark.parametrize("shards", [1, 3])
def test_consumers_racing_give_ups_of_the_same_reservations_settle_each_exactly_one_way(shards):
    """Order tasks (a consumer) and give-ups (replay limit, a refusal, staff) of the same
    reservations at the same moment, from several threads: each reservation ends as an
    order or given back, never both, and every unit is counted once."""
    activity = make_activity(stock=30, shards=shards)
    entries = [reserve_on_shards(activity, user) for user in make_users(30)]
    jobs = [("order", e) for e in entries] + [("give_up", e) for e in entries]
    random.shuffle(jobs)
    gave_up, errors = {}, []
    lock = threading.Lock()

    def work(chunk):
        try:
            for action, entry in chunk:
                if action == "order":
                    order_create_task(activity.pk, entry.reservation_id, entry.user_id, entry.quantity, entry.shard)
                elif reservation_give_up(activity_id=activity.pk, entry=entry, reason="staff"):
                    with lock:
                        gave_up[(entry.shard, entry.reservation_id)] = True
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(jobs[i::6],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors

    # (shard, reservation id): log ids are unique per shard only.
    ordered = set(Order.objects.filter(activity=activity).values_list("shard", "reservation_id"))
    released = set(ReleasedReservation.objects.filter(activity=activity).values_list("shard", "reservation_id"))
    assert ordered | released == {(e.shard, e.reservation_id) for e in entries}
    assert not ordered & released
    assert set(gave_up) == released
    assert redis_remaining(activity.pk) == len(released)
    assert not reservations_pending(activity_id=activity.pk)
    assert_units_counted_once(activity)


# --- B and C: forced re-warms while shoppers cancel and buy again ---------------------------


@pytest.mark.parametrize("shards", [1, 3])
def test_forced_rewarms_racing_cancels_and_new_purchases_keep_units_and_participants_exact(shards):
    """Shoppers buy, get their order, cancel it and buy again, while an operator forces
    re-warms in a loop. Each returned unit must be counted once (B), and once everything
    is quiet exactly the shoppers holding a reservation or a live order are participants:
    a re-warm must not leave a shopper who cancelled blocked (C)."""
    activity = make_activity(stock=8, shards=shards)
    users = make_users(8)

    def shop(mine):
        for round_ in range(25):
            for user in mine:
                entry = reserve_on_shards(activity, user)
                if entry is None:
                    continue  # sold out for a moment, or blocked: the final check tells
                orders_create_from_reservations(activity_id=activity.pk, entries=[entry])
                order = Order.objects.filter(activity=activity, reservation_id=entry.reservation_id).first()
                if order is not None and (round_ < 24 or random.random() < 0.5):
                    order_cancel(order=order, reason="shopper")

    rewarms = shopping_while_rewarming(activity.pk, shop, [users[i::4] for i in range(4)])
    assert any(isinstance(r, WarmupResult) for r in rewarms), "no re-warm completed"

    reservations_drain(activity_id=activity.pk)
    assert not AnomalyOrder.objects.filter(activity=activity).exists()
    assert_units_counted_once(activity)
    live = Order.objects.filter(activity=activity, status__in=Order.LIVE_STATUSES)
    expected = {
        u: r if shards == 1 else claim_value(s, r) for u, s, r in live.values_list("user_id", "shard", "reservation_id")
    }
    assert participants_in_redis(activity) == expected


# --- E: closing an activity while it is re-warmed -----------------------------------------


def _activity_keys(activity_id: int) -> list[bytes]:
    client = stock_redis()
    return sorted({k for p in ActivityKeys(activity_id).scan_patterns for k in client.scan_iter(match=p)})


def test_close_racing_forced_rewarms_leaves_no_key_of_the_closed_activity(settings):
    """An operator's force re-warm (admin) and the close task at the same moment: once
    the activity is ended and its keys are removed, nothing may write them again."""
    now = timezone.now()
    activity = make_activity(stock=20, start_at=now - timedelta(seconds=30), end_at=now + timedelta(seconds=1))
    buy(activity, make_users(8))
    reserve(activity, make_users(1, prefix="late")[0])  # one still in the log: the close drains it
    settled = activity.end_at + timedelta(seconds=settings.SECKILL_ACTIVITY_CACHE_TTL + 1)
    wait_until(lambda: timezone.now() > settled, timeout=60, what="the sale to end and settle")
    started, errors, refusals = threading.Event(), [], []

    def rewarm_until_closed():
        try:
            while True:
                try:
                    activity_warmup(activity_id=activity.pk, force=True)
                except WarmupError as exc:
                    refusals.append(str(exc))
                    if "ended" in str(exc):
                        return
                started.set()
        except Exception as exc:
            errors.append(exc)
        finally:
            started.set()
            connection.close()

    rewarmers = [threading.Thread(target=rewarm_until_closed) for _ in range(2)]
    for t in rewarmers:
        t.start()
    started.wait(30)
    wait_until(lambda: _close_or_none(activity.pk), timeout=60, what="the close to succeed")
    for t in rewarmers:
        t.join(60)
    assert not errors, errors
    assert Activity.objects.get(pk=activity.pk).status == Activity.Status.ENDED
    assert _activity_keys(activity.pk) == []
    assert Order.objects.filter(activity=activity).count() == 9


def _close_or_none(activity_id: int):
    try:
        return activity_close(activity_id=activity_id)
    except WarmupError:
        return None
