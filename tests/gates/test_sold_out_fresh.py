"""The sold-out memory says "sold out" only while Redis's answer is fresh: once it has run
out, units that came back meanwhile are sold to everyone who asks at that moment, however
many ask at once. Real threads through the in-process WSGI stacks, real Redis and
PostgreSQL, this process's own memory."""

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from core.memory import memories
from orders.models import Order
from orders.services.lifecycle import orders_expire_overdue
from seckill.sale.activities import activity_token_ensure
from seckill.sale.replay import reservations_drain
from seckill.sale.selectors import redis_remaining
from server.handlers import StackDispatcher

from ..factories import make_activity, make_users
from ..helpers import wait_until, wsgi_call
from .support import concurrently, keys_of

pytestmark = pytest.mark.django_db(transaction=True)

UNITS = 25


def _sold_out_memory():
    return next(memory for memory in memories() if memory.name == "seckill.sale.soldout")


def test_units_back_after_the_memory_ran_out_are_sold_to_every_shopper_at_once(settings):
    settings.SECKILL_SOLD_OUT_TTL = 1.0  # the production default (the test settings turn it off)
    app = StackDispatcher()
    activity = make_activity(stock=UNITS)
    *shoppers, late = make_users(UNITS + 1)
    keys, token = keys_of([*shoppers, late]), activity_token_ensure(activity_id=activity.pk)

    def buy(user) -> tuple[int, bytes]:
        answer = wsgi_call(
            app,
            "POST",
            f"/api/activities/{activity.pk}/purchase",
            headers={"Authorization": f"Token {keys[user.pk]}"},
            body={"token": token},
        )
        return answer["status"], answer["body"]

    assert [status for status, _ in concurrently([lambda u=u: buy(u) for u in shoppers], threads=UNITS)] == [
        202
    ] * UNITS
    assert buy(late)[0] == 410  # Redis said "sold out"; this process remembers it
    assert activity.pk in _sold_out_memory()

    # The 25 orders time out unpaid: their units go back to Redis and their shoppers are free.
    reservations_drain(activity_id=activity.pk)
    assert Order.objects.filter(activity=activity, status=Order.Status.PENDING).count() == UNITS
    cancelled = orders_expire_overdue(activity_id=activity.pk, now=timezone.now() + timedelta(days=1))
    assert cancelled == UNITS
    assert redis_remaining(activity.pk) == UNITS

    memory = _sold_out_memory()
    wait_until(
        lambda: (memory.expires_at(activity.pk) or 0) <= time.monotonic(), timeout=10, what="the memory to run out"
    )

    # The same 25 shoppers buy again, all at the same moment.
    start = threading.Barrier(UNITS)

    def buy_at_once(user):
        start.wait(timeout=30)
        return buy(user)

    answers = concurrently([lambda u=u: buy_at_once(u) for u in shoppers], threads=UNITS)
    refused = [(status, body) for status, body in answers if status != 202]
    assert not refused, f"{len(refused)} of {UNITS} refused while {UNITS} units were on sale: {refused[:3]}"
    assert redis_remaining(activity.pk) == 0
    reservations_drain(activity_id=activity.pk)
    assert Order.objects.filter(activity=activity, status=Order.Status.PENDING).count() == UNITS
