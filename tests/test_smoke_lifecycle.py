import pytest
from rest_framework.test import APIClient

from inventory.models import SeckillStock, StockMovement
from orders.models import Order
from orders.services.creation import orders_create_from_reservations
from seckill.sale.activities import activity_token_ensure
from seckill.sale.selectors import redis_remaining
from stock.reservations import reservations_pending

from .factories import make_activity, make_users

pytestmark = pytest.mark.django_db(transaction=True)


def test_buy_then_cancel_returns_stock_and_frees_the_shopper():
    activity = make_activity(stock=2)
    (user,) = make_users(1)
    client = APIClient()
    client.force_authenticate(user)
    token = activity_token_ensure(activity_id=activity.pk)
    assert client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json").status_code == 202
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk))
    order = Order.objects.get(activity=activity, user=user)
    assert redis_remaining(activity.pk) == 1
    response = client.post(f"/api/orders/{order.order_no}/cancel")
    assert response.status_code == 200, response.content
    assert redis_remaining(activity.pk) == 2
    assert SeckillStock.objects.get(activity=activity).available == 2
    assert StockMovement.objects.filter(order=order).count() == 2
    # cancelled twice: still one return
    client.post(f"/api/orders/{order.order_no}/cancel")
    assert redis_remaining(activity.pk) == 2
    assert client.post(f"/api/orders/{order.order_no}/pay").status_code == 409
    # the shopper may buy again
    assert client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json").status_code == 202
