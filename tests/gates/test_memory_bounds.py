"""A web process's memories answer for the server only within their bound (docs/API.md:
a refusal is true at some moment of its request, less at most a second): production's
defaults are within it, a setting beyond it refuses to start, and a shopper who cancelled
is not told ``duplicate`` once the bound has passed."""

import json
import time

import pytest
from rest_framework.test import APIClient

from orders.models import Order
from orders.services.lifecycle import order_cancel
from seckill.purchase.took_part import took_part_known
from seckill.sale.activities import activity_token_ensure
from seckill.sale.replay import reservations_drain

from ..factories import make_activity, make_users, token_of
from ..helpers import wait_until
from .test_deployment import manage, production_env

MEMORIES = (
    "SECKILL_SOLD_OUT_TTL",
    "SECKILL_DUPLICATE_TTL",
    "SECKILL_ACTIVITY_CACHE_TTL",
    "SECKILL_LIST_CACHE_TTL",
    "SECKILL_ROOM_STATUS_TTL",
    "SECKILL_BLACKLIST_CACHE_TTL",
)


def _production_values() -> dict:
    script = "from django.conf import settings; import json; print(json.dumps({n: getattr(settings, n) for n in %r}))"
    result = manage("shell", "-c", script % (("SECKILL_MEMORY_BOUND", *MEMORIES),), env=production_env())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_memories_are_within_the_bound():
    """Seen failing on the code before: the duplicate memory lasted 10 s."""
    values = _production_values()
    assert values["SECKILL_MEMORY_BOUND"] <= 1
    assert {n: v for n, v in values.items() if v > values["SECKILL_MEMORY_BOUND"]} == {}


@pytest.mark.parametrize("memory", ["SECKILL_DUPLICATE_TTL", "SECKILL_SOLD_OUT_TTL"])
def test_a_memory_beyond_the_bound_refuses_to_start(memory):
    result = manage("check", env=production_env(**{memory: "10"}))
    assert result.returncode != 0 and memory in result.stderr


@pytest.mark.django_db(transaction=True)
def test_a_shopper_who_cancelled_may_buy_again_once_the_bound_has_passed(settings):
    """Through the purchase's gates, with production's duplicate memory."""
    settings.SECKILL_DUPLICATE_TTL = _production_values()["SECKILL_DUPLICATE_TTL"]
    activity = make_activity(stock=3)
    (alice,) = make_users(1, prefix="again")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(alice)}")
    body = {"token": activity_token_ensure(activity_id=activity.pk)}
    path = f"/api/activities/{activity.pk}/purchase"
    assert client.post(path, body, format="json").status_code == 202
    assert client.post(path, body, format="json").json()["code"] == "duplicate"
    assert took_part_known(activity.pk, alice.pk), "answered from this process's memory"
    reservations_drain(activity_id=activity.pk)
    order_cancel(order=Order.objects.get(activity=activity, user=alice), reason="shopper")
    cancelled_at = time.monotonic()

    wait_until(lambda: time.monotonic() - cancelled_at > settings.SECKILL_MEMORY_BOUND, what="the memory's bound")
    again = client.post(path, body, format="json")
    assert again.status_code == 202, again.json()
