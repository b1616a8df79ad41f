"""Redis away: the circuit breaker, the database path behind its cap, and the
re-synchronisation before the breaker closes. Redis is made really unreachable
(settings point at a port nothing listens on, or a proxy that is cut), never mocked."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction
from django.db.models import Count, Sum

from core.errors import ApiError
from inventory.models import SeckillStock, StockMovement
from orders.models import Order
from orders.services import DB_PATH_PREFIX
from seckill.breaker import CircuitBreaker, redis_breaker
from seckill.purchase import purchase_reserve
from seckill.reconciliation import reconcile
from seckill.replay import reservations_drain
from seckill.selectors import activity_snapshot, redis_remaining
from stock.redis_client import reset_stock_redis

from ..factories import make_activity, make_users
from ..helpers import free_port, wait_until, waiting_on_a_lock


def test_breaker_opens_after_consecutive_failures_and_lets_one_probe_through():
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=0.2, epoch_reader=lambda: 7)
    assert breaker.allow() == "closed"
    breaker.record_failure("closed")
    assert breaker.state == "closed"
    assert not breaker.fallback_begin(), "closed: no database path (nothing would re-synchronise Redis)"
    breaker.record_failure("closed")
    assert breaker.state == "open" and breaker.allow() is None
    assert wait_until(lambda: breaker.allow() == "probe", timeout=10)
    assert breaker.state == "half_open"
    assert breaker.allow() is None, "only one probe at a time"
    assert not breaker.fallback_begin(), "half-open: no new database-path purchase"
    breaker.record_failure("closed")  # a call made before it opened fails late
    assert breaker.state == "half_open", "a late failure must not disturb the probe"
    breaker.record_failure("probe")  # the probe failed: open again, for a full reset time
    assert breaker.state == "open" and breaker.allow() is None
    assert breaker.fallback_begin()
    wait_until(lambda: breaker.probe_due, timeout=10, what="the reset time")
    assert breaker.allow() is None and breaker.state == "half_open", "no probe while a database purchase runs"
    assert not breaker.fallback_begin()
    breaker.fallback_end()
    assert breaker.allow() == "probe"
    breaker.record_success("closed")  # a call made before it opened succeeds late
    assert breaker.state == "half_open", "only the probe (after the re-synchronisation) closes it"
    breaker.record_success("probe")
    assert breaker.state == "closed" and breaker.allow() == "closed"


def _reserve(activity_id: int, user_id: int, quantity: int = 1):
    try:
        return purchase_reserve(activity=activity_snapshot(activity_id), user_id=user_id, quantity=quantity)
    except ApiError as exc:
        return exc.code
    finally:
        if threading.current_thread() is not threading.main_thread():
            connection.close()  # each pool thread has its own connection


@pytest.fixture
def redis_unreachable(settings):
    def cut():
        settings.SECKILL_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
        reset_stock_redis()

    def restore(url=settings.SECKILL_REDIS_URL):
        settings.SECKILL_REDIS_URL = url
        reset_stock_redis()

    yield cut, restore
    reset_stock_redis()


@pytest.mark.django_db(transaction=True)
def test_database_path_sells_exactly_the_stock_less_safety_under_threads(redis_unreachable, settings):
    settings.SECKILL_FALLBACK_CONCURRENCY = 3
    settings.SECKILL_BREAKER_RESET = 3600  # stays open for the whole test
    cut, _ = redis_unreachable
    activity = make_activity(stock=25, safety_stock=5)
    users = make_users(60)
    cut()

    def buy_until_answered(user):
        while (answer := _reserve(activity.pk, user.pk)) == "busy":
            pass  # the cap said busy: a shopper clicks again
        return answer

    busy_seen = threading.Event()

    def first_try(user):
        answer = _reserve(activity.pk, user.pk)
        if answer == "busy":
            busy_seen.set()
        return answer

    with ThreadPoolExecutor(max_workers=20) as pool:
        first = list(pool.map(first_try, users))
        answers = list(pool.map(buy_until_answered, users))
    assert busy_seen.is_set(), "20 threads against a cap of 3 never met the cap"
    assert {type(a).__name__ if not isinstance(a, str) else a for a in first} <= {"Reserved", "busy", "sold_out"}
    sold = Order.objects.filter(activity=activity)
    assert sold.aggregate(u=Sum("quantity"))["u"] == 20, "the safety stock (5 of 25) is never sold by the database"
    assert all(o.reservation_id.startswith(DB_PATH_PREFIX) for o in sold)
    assert not sold.values("user").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert SeckillStock.objects.get(activity=activity).available == 5
    assert StockMovement.objects.filter(activity=activity, kind="deduct").aggregate(u=Sum("quantity"))["u"] == 20
    for before, after in zip(first, answers, strict=True):
        if not isinstance(before, str):
            assert after == "duplicate", "a buyer of round one bought again"
    assert sum(1 for a in first + answers if not isinstance(a, str)) == 20
    assert redis_breaker().state == "open"


@pytest.mark.django_db(transaction=True)
def test_stock_is_resynchronised_before_the_breaker_closes(redis_unreachable, settings):
    settings.SECKILL_BREAKER_FAILURES = 1
    settings.SECKILL_BREAKER_RESET = 0.2
    cut, restore = redis_unreachable
    activity = make_activity(stock=10)
    users = make_users(12)
    assert type(_reserve(activity.pk, users[0].pk)).__name__ == "Reserved"  # through Redis
    wait_until(lambda: reconcile(activity_id=activity.pk)["reserved_not_ordered"] == 1, timeout=10)

    cut()
    for user in users[1:4]:
        assert type(_reserve(activity.pk, user.pk)).__name__ == "Reserved"  # database path
    assert redis_breaker().state == "open"
    assert _reserve(activity.pk, users[1].pk) == "duplicate"

    restore()
    # Redis kept its stock through the outage: 9, though the database sold 3 more.
    assert redis_remaining(activity.pk) == 9
    wait_until(lambda: redis_breaker().probe_due, timeout=10, what="the reset time")
    reserved = _reserve(activity.pk, users[4].pk)  # the probe
    assert type(reserved).__name__ == "Reserved"
    assert redis_breaker().state == "closed"
    # Re-derived: 10 - 3 sold by the database - 1 reserved (log) - 1 this purchase.
    assert reserved.remaining == 5 and redis_remaining(activity.pk) == 5
    for user in users[1:4]:
        assert _reserve(activity.pk, user.pk) == "duplicate", "database-path buyers restored as participants"
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report


@pytest.mark.django_db(transaction=True)
def test_the_probe_waits_for_database_path_purchases_in_flight_before_resynchronising(redis_unreachable, settings):
    settings.SECKILL_BREAKER_FAILURES = 1
    settings.SECKILL_BREAKER_RESET = 0.2
    cut, restore = redis_unreachable
    activity = make_activity(stock=10)
    users = make_users(5)
    cut()
    assert type(_reserve(activity.pk, users[0].pk)).__name__ == "Reserved"  # opens the breaker: database path
    restore()

    with ThreadPoolExecutor(max_workers=3) as pool:
        # The test holds the stock row, so a database-path purchase stays in flight:
        # its order inserted, its stock update waiting, nothing committed.
        with transaction.atomic():
            SeckillStock.objects.select_for_update().get(activity=activity)
            in_flight = pool.submit(_reserve, activity.pk, users[1].pk)
            wait_until(lambda: waiting_on_a_lock() == 1, timeout=30, what="the purchase to wait on the stock row")
            wait_until(lambda: redis_breaker().probe_due, timeout=10, what="the reset time")
            # Redis is back and the reset time is over, but the database has not said yet
            # what the purchase in flight sold: no probe may re-derive the stock now.
            assert pool.submit(_reserve, activity.pk, users[2].pk).result(timeout=60) == "busy"
            assert redis_breaker().state != "closed"
        assert type(in_flight.result(timeout=60)).__name__ == "Reserved"
        probe = pool.submit(_reserve, activity.pk, users[3].pk).result(timeout=60)  # the probe now
    assert type(probe).__name__ == "Reserved" and redis_breaker().state == "closed"
    # 10 - 2 sold by the database - 1 reserved by the probe: Redis offers what the database holds.
    assert redis_remaining(activity.pk) == 7
    assert SeckillStock.objects.get(activity=activity).available == 8
    assert _reserve(activity.pk, users[1].pk) == "duplicate", "the database-path buyer in flight is a participant"
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report


@pytest.mark.django_db(transaction=True)
def test_beat_resynchronises_when_no_purchase_comes_after_the_outage(redis_unreachable, settings):
    """The outage's last purchases sold the rest from the database and nobody buys again,
    so no probe runs: the reconciliation task (beat) re-derives the stock itself, and its
    check then finds the identities intact (no drift anomaly)."""
    from orders.models import AnomalyOrder
    from seckill.tasks import reconcile_live_task

    settings.SECKILL_BREAKER_FAILURES = 1
    settings.SECKILL_BREAKER_RESET = 3600  # the web side never probes in this test
    cut, restore = redis_unreachable
    activity = make_activity(stock=6)
    users = make_users(7)
    assert type(_reserve(activity.pk, users[0].pk)).__name__ == "Reserved"  # through Redis
    reservations_drain(activity_id=activity.pk)  # its order
    cut()
    for user in users[1:6]:
        assert type(_reserve(activity.pk, user.pk)).__name__ == "Reserved"  # database path
    assert _reserve(activity.pk, users[6].pk) == "sold_out"  # the database has nothing left
    restore()
    assert redis_remaining(activity.pk) == 5, "Redis kept its pre-outage stock"

    reconcile_live_task()

    assert redis_remaining(activity.pk) == 0
    assert not AnomalyOrder.objects.filter(activity=activity).exists()
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
    assert reconcile_live_task() == {activity.pk: True}  # nothing due the second time


def test_the_breaker_remembers_the_resync_epoch_it_opened_with_and_turns_half_open_when_it_moved():
    epochs = iter([3, None])
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=3600, epoch_reader=lambda: next(epochs))
    breaker.record_failure(breaker.allow())
    opening = breaker.fallback_begin()
    assert breaker.state == "open" and opening.epoch == 3, "read right after it opened"
    breaker.fallback_end()
    breaker.resynced(opening)  # a database-path purchase found the epoch moved
    assert breaker.state == "half_open" and not breaker.fallback_begin()
    assert breaker.allow() == "probe", "the next caller probes Redis, long before the reset time"
    breaker.record_failure("probe")  # Redis still away for this process: open again, the epoch read again
    reopened = breaker.fallback_begin()
    assert reopened.number == opening.number + 1 and reopened.epoch is None, "unreadable: no sale will match it"
    breaker.resynced(opening)  # a late refusal from the earlier opening
    assert breaker.state == "open", "an earlier opening's refusal must not disturb this one"
    breaker.fallback_end()


@pytest.mark.django_db(transaction=True)
def test_an_unknown_resync_epoch_sells_nothing_on_the_database_path():
    from seckill.fallback import ResyncedMeanwhile, purchase_fallback

    activity = make_activity(stock=5)
    (user,) = make_users(1)
    with pytest.raises(ResyncedMeanwhile):
        purchase_fallback(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1, epoch=None)
    assert not Order.objects.filter(activity=activity).exists()
    assert SeckillStock.objects.get(activity=activity).available == 5


@pytest.mark.django_db(transaction=True)
def test_a_resynchronisation_waits_for_a_database_path_purchase_in_flight_and_then_stops_the_database_path(
    redis_unreachable, settings
):
    """Beat (or another process's probe) re-synchronises while this process's breaker is
    still open, with a database-path purchase of it in flight: the re-synchronisation
    waits for that purchase and counts it; after it, this process sells nothing more from
    the database (its breaker's epoch is old), it probes Redis and buys there."""
    from seckill.fallback import stock_resync

    settings.SECKILL_BREAKER_FAILURES = 1
    settings.SECKILL_BREAKER_RESET = 3600  # this process's own probe never comes in time
    cut, restore = redis_unreachable
    activity = make_activity(stock=10)
    users = make_users(4)
    cut()
    assert _reserve(activity.pk, users[0].pk).reservation_id.startswith(DB_PATH_PREFIX)  # opens the breaker
    restore()

    with ThreadPoolExecutor(max_workers=2) as pool:
        with transaction.atomic():
            SeckillStock.objects.select_for_update().get(activity=activity)
            in_flight = pool.submit(_reserve, activity.pk, users[1].pk)  # waits on the stock row
            wait_until(lambda: waiting_on_a_lock() == 1, timeout=30, what="the purchase to wait on the stock row")

            def resync():
                try:
                    return stock_resync()
                finally:
                    connection.close()

            resync_done = pool.submit(resync)
            wait_until(lambda: waiting_on_a_lock() == 2, timeout=30, what="the resync to wait for the purchase")
            assert not resync_done.done()
        assert in_flight.result(timeout=60).reservation_id.startswith(DB_PATH_PREFIX)
        assert resync_done.result(timeout=60) == [activity.pk]
    assert redis_remaining(activity.pk) == 8, "the purchase in flight is counted in Redis"
    db_path_orders = Order.objects.filter(activity=activity, reservation_id__startswith=DB_PATH_PREFIX).count()
    assert redis_breaker().state == "open"

    after = _reserve(activity.pk, users[2].pk)
    assert type(after).__name__ == "Reserved" and not after.reservation_id.startswith(DB_PATH_PREFIX)
    assert Order.objects.filter(activity=activity, reservation_id__startswith=DB_PATH_PREFIX).count() == db_path_orders
    assert redis_breaker().state == "closed", "the refused purchase probed Redis and closed the breaker"
    assert redis_remaining(activity.pk) == 7
    assert _reserve(activity.pk, users[1].pk) == "duplicate"
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["reserved_not_ordered"] == 1, report
