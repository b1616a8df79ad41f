"""An order number in a URL is the shopper's input: one no order can have (a NUL byte,
which PostgreSQL text cannot hold, or any length) is a plain 404, never a 500."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from orders.models import Order

from ..factories import make_activity, make_users
from ..lifecycle.helpers import buy

pytestmark = pytest.mark.django_db(transaction=True)

BAD_NUMBERS = ["%00", "A1-0-%00x", "%00" * 3, "x" * 500]


@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_the_order_api_answers_404_json_for_impossible_numbers(bad):
    activity = make_activity(stock=2)
    (user,) = make_users(1)
    (order,) = buy(activity, [user])
    client = APIClient()
    client.force_authenticate(user)
    for method, path in [
        ("get", f"/api/orders/{bad}/"),
        ("post", f"/api/orders/{bad}/pay"),
        ("post", f"/api/orders/{bad}/cancel"),
    ]:
        response = getattr(client, method)(path)
        assert response.status_code == 404, (path, response.status_code)
        assert response.json()["code"] == "not_found"
    assert Order.objects.get(pk=order.pk).status == Order.Status.PENDING


@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_the_order_pages_answer_404_for_impossible_numbers(bad):
    activity = make_activity(stock=2)
    (user,) = make_users(1)
    (order,) = buy(activity, [user])
    client = Client()
    client.force_login(user)
    for path in [f"/orders/{bad}/pay/", f"/orders/{bad}/cancel/"]:
        assert client.post(path).status_code == 404, path
    assert Order.objects.get(pk=order.pk).status == Order.Status.PENDING
