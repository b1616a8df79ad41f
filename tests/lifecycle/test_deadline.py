"""The payment deadline: a delayed Celery task per batch of orders and the sweeper;
pay and timeout racing for the same order end in exactly one outcome."""

import math
import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone
from rest_framework.test import APIClient

from inventory.models import SeckillStock, StockMovement
from orders.models import Order, Payment
from orders.payments import PaymentError, payment_settle, payment_start
from orders.services.lifecycle import OrderNotCancellable, order_cancel, orders_expire_due, orders_expire_overdue
from orders.tasks import orders_expire_overdue_task
from seckill.purchase.reserve import Reserved, purchase_reserve
from seckill.sale.activities import activity_token_ensure
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_snapshot
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import wait_until
from .helpers import buy, close_connection

pytestmark = pytest.mark.django_db(transaction=True)


def _payment_started(order) -> Payment:
    """A payment the shopper started before the deadline (payment_start refuses one after)."""
    return Payment.objects.create(order=order, variant="simulated", currency="CNY", total=order.amount)


def _provider_confirms(payment, now=None) -> bool:
    """The provider's verified success arrives: True if it paid the order, False if it was
    too late and refunded."""
    payment = payment_settle(payment=payment, now=now)
    assert payment.status in ("confirmed", "refunded") and payment.settled_at is not None
    return not payment.refund_reason


def _assert_each_unit_moved_once(activity):
    """One DEDUCT per order; one RETURN per cancelled order and none for a paid one."""
    orders = Order.objects.filter(activity=activity).annotate(
        deducts=Count("stock_movements", filter=Q(stock_movements__kind=StockMovement.Kind.DEDUCT)),
        returns=Count("stock_movements", filter=Q(stock_movements__kind=StockMovement.Kind.RETURN)),
    )
    for order in orders:
        assert order.deducts == 1, order
        assert order.returns == (1 if order.status == Order.Status.CANCELLED else 0), order


def _assert_identities(activity):
    report = reconcile(activity_id=activity.pk, dry_run=True)
    assert report["identity_ok"], report
    assert not any(report["buckets"].values()), report
    return report


@pytest.mark.slow
def test_200_orders_with_a_2s_deadline_half_paid_around_it(celery_worker):
    activity = make_activity(stock=200, pay_timeout=2)
    users = make_users(200)
    snapshot = activity_snapshot(activity.pk)
    for user in users:
        assert isinstance(purchase_reserve(activity=snapshot, user_id=user.pk, quantity=1), Reserved)
    # The worker turns the reservations into orders and schedules their deadlines.
    wait_until(lambda: Order.objects.filter(activity=activity).count() == 200, timeout=120, what="200 orders")

    rng = random.Random(7)
    orders = list(Order.objects.filter(activity=activity))
    to_pay = rng.sample(orders, 100)
    # Each payment is tried at a random moment between 1 s before and 1 s after its deadline.
    # Sorted by (moment, pk): two equal moments must never fall back to comparing orders.
    plan = sorted(
        [(o.pay_deadline + timedelta(seconds=rng.uniform(-1, 1)), o) for o in to_pay],
        key=lambda job: (job[0], job[1].pk),
    )
    accepted, refused = set(), set()
    payments = {o.pk: _payment_started(o) for o in to_pay}

    def pay(moment, order):
        try:
            delay = (moment - timezone.now()).total_seconds()
            if delay > 0:
                threading.Event().wait(delay)  # the stimulus: the provider's success at this moment
            (accepted if _provider_confirms(payments[order.pk]) else refused).add(order.pk)
        finally:
            close_connection()

    with ThreadPoolExecutor(max_workers=40) as pool:
        list(pool.map(lambda job: pay(*job), plan))
    assert len(accepted) + len(refused) == 100

    # The deadline tasks (in the worker) cancel every order left unpaid.
    wait_until(
        lambda: not Order.objects.filter(activity=activity, status=Order.Status.PENDING).exists(),
        timeout=120,
        what="every unpaid order to be cancelled",
    )
    paid = set(Order.objects.filter(activity=activity, status=Order.Status.PAID).values_list("pk", flat=True))
    cancelled = Order.objects.filter(activity=activity, status=Order.Status.CANCELLED)
    assert paid == accepted, "a payment reported as accepted must be the order's outcome"
    assert set(cancelled.values_list("pk", flat=True)) == {o.pk for o in orders} - paid
    assert refused <= set(cancelled.values_list("pk", flat=True))
    # Every success too late was recorded and refunded; none that paid was.
    assert (
        set(
            Payment.objects.filter(order__activity=activity, status="refunded", refund_reason="late").values_list(
                "order_id", flat=True
            )
        )
        == refused
    )
    assert not Order.objects.filter(activity=activity, status=Order.Status.PAID, cancelled_at__isnull=False).exists()
    assert not cancelled.filter(paid_at__isnull=False).exists()
    assert set(cancelled.values_list("cancel_reason", flat=True)) == {"timeout"}
    _assert_each_unit_moved_once(activity)

    n_cancelled = cancelled.count()
    returned = ActivityKeys(activity.pk).returned
    wait_until(lambda: stock_redis().scard(returned) == n_cancelled, timeout=60, what="Redis returns")
    assert redis_remaining(activity.pk) == n_cancelled
    assert SeckillStock.objects.get(activity=activity).available == n_cancelled
    _assert_identities(activity)

    # The cancelled shoppers may buy again.
    again = list(cancelled.values_list("user_id", flat=True))
    for user_id in again:
        assert isinstance(purchase_reserve(activity=snapshot, user_id=user_id, quantity=1), Reserved)
    assert redis_remaining(activity.pk) == 0
    # Their second orders appear (and, unpaid, expire in turn).
    wait_until(
        lambda: Order.objects.filter(activity=activity, user_id__in=again).count() == 2 * len(again),
        timeout=120,
        what="the second orders",
    )


def test_pay_and_timeout_at_the_same_instant_end_in_exactly_one_outcome():
    activity = make_activity(stock=40, pay_timeout=600)
    orders = buy(activity, make_users(40))
    barrier = threading.Barrier(len(orders) * 2)
    outcomes: dict[int, list[str]] = {o.pk: [] for o in orders}
    payments = {o.pk: _payment_started(o) for o in orders}

    def pay(order):
        try:
            barrier.wait()
            if _provider_confirms(payments[order.pk], now=order.pay_deadline - timedelta(milliseconds=1)):
                outcomes[order.pk].append("paid")
        finally:
            close_connection()

    def expire(order):
        try:
            barrier.wait()
            if order_cancel(order=order, reason="timeout", now=order.pay_deadline).status == Order.Status.CANCELLED:
                outcomes[order.pk].append("cancelled")
        except OrderNotCancellable:
            pass
        finally:
            close_connection()

    threads = [threading.Thread(target=f, args=(o,)) for o in orders for f in (pay, expire)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for order in orders:
        order.refresh_from_db()
        assert outcomes[order.pk] == [order.status], (order, outcomes[order.pk])
        payment = Payment.objects.get(pk=payments[order.pk].pk)
        assert payment.status == ("confirmed" if order.status == Order.Status.PAID else "refunded"), payment
    assert {o.status for o in orders} <= {Order.Status.PAID, Order.Status.CANCELLED}
    _assert_each_unit_moved_once(activity)
    n_cancelled = sum(o.status == Order.Status.CANCELLED for o in orders)
    assert redis_remaining(activity.pk) == n_cancelled
    _assert_identities(activity)


def test_timeout_cancels_only_past_the_deadline_the_shopper_any_time():
    activity = make_activity(stock=3, pay_timeout=600)
    first, second = buy(activity, make_users(2))
    with pytest.raises(OrderNotCancellable, match="not past its payment deadline"):
        order_cancel(order=first, reason="timeout")
    due_second = math.ceil(first.pay_deadline.timestamp())
    assert orders_expire_due(activity_id=activity.pk, due_second=due_second) is None, "too early: wait"
    assert orders_expire_overdue(activity_id=activity.pk) == 0
    assert order_cancel(order=first, reason="shopper").status == Order.Status.CANCELLED
    assert order_cancel(order=first, reason="shopper").status == Order.Status.CANCELLED  # again: no-op
    assert StockMovement.objects.filter(order=first, kind=StockMovement.Kind.RETURN).count() == 1
    later = second.pay_deadline + timedelta(seconds=1)
    assert orders_expire_due(activity_id=activity.pk, due_second=due_second, now=later) == 1
    assert orders_expire_due(activity_id=activity.pk, due_second=due_second, now=later) == 0
    late = _payment_started(second)
    second.refresh_from_db()
    with pytest.raises(PaymentError) as refused:
        payment_start(order=second)
    assert refused.value.code == "not_payable"
    assert not _provider_confirms(late)  # a success too late: refunded, the order stays cancelled
    assert Order.objects.get(pk=second.pk).status == Order.Status.CANCELLED
    assert redis_remaining(activity.pk) == 3
    _assert_identities(activity)


def test_the_sweeper_cancels_what_no_deadline_task_did():
    # No worker runs here: the deadline tasks wait in the broker, unconsumed.
    activity = make_activity(stock=30, pay_timeout=1)
    orders = buy(activity, make_users(30))
    assert _provider_confirms(_payment_started(orders[0]))
    wait_until(lambda: timezone.now() > orders[-1].pay_deadline, timeout=30, what="the deadlines to pass")
    assert orders_expire_overdue(batch_size=7) == 29
    assert orders_expire_overdue() == 0
    assert Order.objects.filter(activity=activity, status=Order.Status.CANCELLED).count() == 29
    _assert_each_unit_moved_once(activity)
    assert redis_remaining(activity.pk) == 29
    _assert_identities(activity)
    schedule = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert schedule["orders.tasks.orders_expire_overdue_task"] == settings.SECKILL_EXPIRY_SWEEP_INTERVAL
    assert schedule["seckill.tasks.reconcile_live_task"] == settings.SECKILL_RECONCILE_INTERVAL


def test_sold_out_ends_when_a_cancelled_unit_returns():
    activity = make_activity(stock=1, pay_timeout=600)
    holder, waiting = make_users(2, prefix="sold")
    token = activity_token_ensure(activity_id=activity.pk)
    (order,) = buy(activity, [holder])
    client = APIClient()
    client.force_authenticate(waiting)
    url = f"/api/activities/{activity.pk}/purchase"
    assert client.post(url, {"token": token}, format="json").status_code == 410
    order_cancel(order=order, reason="shopper")
    # The unit is back in Redis at once; a web process must not keep saying "sold out"
    # for longer than its local flag lives (docs/LIFECYCLE.md asks for about 1 s).
    wait_until(
        lambda: client.post(url, {"token": token}, format="json").status_code == 202,
        timeout=30,
        interval=0.2,
        what="the returned unit to be sold again",
    )
    assert redis_remaining(activity.pk) == 0


def test_one_deadline_task_per_second_of_deadline_cancels_every_order_due_then(celery_worker):
    activity = make_activity(stock=50, pay_timeout=1)
    orders = buy(activity, make_users(50, prefix="sched"))  # one batch: one deadline
    assert len(orders) == 50
    wait_until(
        lambda: Order.objects.filter(activity=activity, status=Order.Status.CANCELLED).count() == 50,
        timeout=60,
        what="the deadline task to cancel them",
    )
    tasks = set(re.findall(r"orders\.tasks\.orders_expire_task\[([0-9a-f-]+)\] received", celery_worker.log()))
    assert len(tasks) == 1, celery_worker.log()[-3000:]
    # The worker returns the units to Redis right after its commit.
    wait_until(lambda: redis_remaining(activity.pk) == 50, timeout=30, what="the units back in Redis")
    _assert_identities(activity)


def test_one_drifted_activity_does_not_stop_the_other_activities_timeouts():
    drifted = make_activity(stock=2, pay_timeout=1)
    healthy = make_activity(stock=2, pay_timeout=1)
    drifted_orders = buy(drifted, make_users(2, prefix="drift"))
    healthy_orders = buy(healthy, make_users(2, prefix="healthy"))
    # Drift: the database already holds every unit, so returning one breaks its guard.
    SeckillStock.objects.filter(activity=drifted).update(available=2)
    deadline = max(o.pay_deadline for o in drifted_orders + healthy_orders)
    wait_until(lambda: timezone.now() > deadline, timeout=30, what="the deadlines to pass")

    assert orders_expire_overdue_task() == 2

    assert set(Order.objects.filter(activity=healthy).values_list("status", flat=True)) == {Order.Status.CANCELLED}
    assert set(Order.objects.filter(activity=drifted).values_list("status", flat=True)) == {Order.Status.PENDING}
    assert len(healthy_orders) == 2
    _assert_each_unit_moved_once(healthy)
