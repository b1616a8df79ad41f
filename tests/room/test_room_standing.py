"""GET /api/activities/<id>/room/me: where the calling shopper stands (issue 42), read without
joining them: not joined, in the pre-queue, their place, their live order; refusals as the
contract's JSON, never a 500, never a join."""

import pytest
from rest_framework.test import APIClient

from orders.models import Order
from seckill.sale.replay import reservations_drain
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from .conftest import room_sale
from .test_room import client_of, join

pytestmark = pytest.mark.django_db(transaction=True)


def standing(activity, user):
    answer = client_of(user).get(f"/api/activities/{activity.pk}/room/me")
    assert answer.status_code == 200, answer.content
    assert answer["Cache-Control"].startswith("no-store")
    return answer.json()


def test_not_joined_then_in_the_pre_queue_then_placed():
    activity = room_sale(stock=5, started=False, room_prequeue_minutes=120)
    (alice,) = make_users(1, prefix="stand")
    nobody = {"joined": False, "place": None, "pre_queue": False, "order": None}
    assert standing(activity, alice) == nobody
    assert not stock_redis().sismember(ActivityKeys(activity.pk).room_pre, alice.pk)  # asking joins no one
    join(activity, alice)
    assert standing(activity, alice) == {"joined": True, "place": None, "pre_queue": True, "order": None}

    live = room_sale(stock=5, started=True)
    placed = join(live, alice)["place"]
    assert standing(live, alice) == {"joined": True, "place": placed, "pre_queue": False, "order": None}


def test_a_shopper_who_bought_gets_their_order():
    from seckill.sale.activities import activity_token_ensure

    activity = room_sale(stock=5, started=True)
    (bob,) = make_users(1, prefix="stand-buyer")
    join(activity, bob)
    ticket = client_of(bob).post(f"/api/activities/{activity.pk}/room/ticket").json()["ticket"]
    token = activity_token_ensure(activity_id=activity.pk)
    bought = client_of(bob).post(
        f"/api/activities/{activity.pk}/purchase", {"token": token, "ticket": ticket}, format="json"
    )
    assert bought.status_code == 202
    reservations_drain(activity_id=activity.pk)
    order = Order.objects.get(activity=activity, user=bob)
    assert standing(activity, bob)["order"] == {
        "order_no": order.order_no,
        "status": "pending",
        "url": f"/orders/{order.order_no}/",
    }


def test_refusals():
    activity = room_sale(stock=5, started=True)
    (carol,) = make_users(1, prefix="stand-refused")
    anonymous = APIClient().get(f"/api/activities/{activity.pk}/room/me")
    assert anonymous.status_code in (401, 403) and "code" in anonymous.json()
    unknown = client_of(carol).get("/api/activities/999999/room/me")
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    direct = make_activity(stock=5)
    not_a_room = client_of(carol).get(f"/api/activities/{direct.pk}/room/me")
    assert (not_a_room.status_code, not_a_room.json()["code"]) == (409, "room_not_used")
    assert client_of(carol).post(f"/api/activities/{activity.pk}/room/me").status_code == 405
