"""Orders are view-only in admin: a change form saved there would write the whole row
back and could undo a payment or a cancel made while the page was open."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from orders.models import Order
from orders.services import order_cancel

from ..factories import make_activity, make_users
from ..lifecycle.helpers import buy

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_superuser_saving_an_order_page_cannot_undo_a_cancel():
    activity = make_activity(stock=2)
    (order,) = buy(activity, make_users(1))
    admin_user = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-for-tests")
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/orders/order/{order.pk}/change/"

    page = client.get(url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content  # view only
    order_cancel(order=order, reason="shopper")  # while the page is open
    response = client.post(url, {"status": "pending", "_save": "Save"})

    assert response.status_code == 403
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
    assert client.get("/admin/orders/order/add/").status_code == 403
