"""An order past its payment deadline cannot be paid, even before the deadline task or the
sweeper has cancelled it: otherwise a late payment and the timeout race for units that
the timeout is about to give back (DESIGN.md: "pays within the deadline"). A payment
started in time whose success arrives after the deadline is recorded and refunded."""

import pytest
from django.test import Client
from django.utils import timezone
from payments import PaymentStatus
from rest_framework.test import APIClient

from inventory.models import SeckillStock
from orders.models import Order, Payment
from orders.services.lifecycle import OrderNotPayable, order_pay, orders_expire_overdue
from seckill.sale.selectors import redis_remaining

from ..factories import make_activity, make_users
from ..helpers import wait_until
from ..orders.addresses import give_address
from .helpers import buy

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pending_order_past_its_deadline_is_not_payable_and_times_out():
    activity = make_activity(stock=3, pay_timeout=1)
    (user,) = make_users(1)
    (order,) = buy(activity, [user])
    wait_until(lambda: timezone.now() > order.pay_deadline, timeout=60, what="the payment deadline to pass")

    with pytest.raises(OrderNotPayable):
        order_pay(order=order)
    client = APIClient()
    client.force_authenticate(user)
    response = client.post(f"/api/orders/{order.order_no}/pay")
    assert response.status_code == 409 and response.json()["code"] == "not_payable"
    assert Order.objects.get(pk=order.pk).status == Order.Status.PENDING

    # The sweeper then cancels it and the unit goes back, once, to both sides.
    assert orders_expire_overdue(activity_id=activity.pk) == 1
    order.refresh_from_db()
    assert (order.status, order.cancel_reason, order.paid_at) == (Order.Status.CANCELLED, "timeout", None)
    assert SeckillStock.objects.get(activity=activity).available == 3
    assert redis_remaining(activity.pk) == 3


def test_a_success_after_the_deadline_is_refunded_and_the_order_times_out():
    activity = make_activity(stock=3, pay_timeout=2)
    (user,) = make_users(1)
    give_address(user)  # the pay step asks for it first
    (order,) = buy(activity, [user])
    client = APIClient()
    client.force_authenticate(user)
    started = client.post(f"/api/orders/{order.order_no}/pay").json()
    assert started["status"] == "pending"
    wait_until(lambda: timezone.now() > order.pay_deadline, timeout=60, what="the payment deadline to pass")

    # The shopper completes the checkout too late: acknowledged, recorded, refunded.
    done = Client().post(
        started["payment"]["pay_url"],
        {"outcome": "succeeded"},
        content_type="application/json",
        HTTP_ACCEPT="application/json",
    )
    assert done.status_code == 200 and done.json() == {"outcome": "succeeded"}
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING and order.paid_at is None
    payment = Payment.objects.get(order=order)
    assert (payment.status, payment.refund_reason) == (PaymentStatus.REFUNDED, "late")
    assert client.get(f"/api/orders/{order.order_no}/").json()["payment_status"] == "refunded"

    assert orders_expire_overdue(activity_id=activity.pk) == 1
    order.refresh_from_db()
    assert (order.status, order.cancel_reason) == (Order.Status.CANCELLED, "timeout")
    assert SeckillStock.objects.get(activity=activity).available == 3
    assert redis_remaining(activity.pk) == 3
