"""The waiting room without anyone polling (beat ticks it, the close is dated at the sell-out),
a ticket that outlives a purchase refused for a reason not the shopper's, the ticket
endpoint's expected refusals unlogged, the sale page's button leading to the room, and the
commands that make room sales."""

import json
import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import ApiError
from seckill.models import Activity
from seckill.purchase.reserve import purchase_reserve
from seckill.room.status import room_status
from seckill.room.tickets import room_ticket_check
from seckill.sale.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..drills.infra import start_celery_beat
from ..factories import make_users, token_of
from ..helpers import subprocess_env, wait_until
from .conftest import room_sale, snapshot_of
from .test_tickets import admitted_ticket, buy, stock_script_calls

pytestmark = pytest.mark.django_db(transaction=True)


def client_of(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    return client


def _room_field(activity, name: str) -> int | None:
    value = stock_redis().hget(ActivityKeys(activity.pk).room_state, name)
    return int(value) if value is not None else None


def test_beat_lets_shoppers_in_and_closes_the_room_at_the_sell_out_with_nobody_polling(celery_worker, process_logs):
    activity = room_sale(stock=2, started=False, room_rate=1000, room_prequeue_minutes=120)
    shoppers = make_users(5, prefix="unpolled")
    for shopper in shoppers:  # the pre-queue: the draw is beat's to make at the start
        assert client_of(shopper).post(f"/api/activities/{activity.pk}/room/join").json()["pre_queue"] is True
    Activity.objects.filter(pk=activity.pk).update(start_at=timezone.now())
    beat = start_celery_beat(process_logs, env=subprocess_env())
    try:
        keys = ActivityKeys(activity.pk)
        # Nobody reads the status: beat draws and lets in as many as there are units.
        wait_until(lambda: (_room_field(activity, "serving") or 0) >= 2, timeout=30, what="beat to let shoppers in")
        places = {int(u): int(p) for u, p in stock_redis().hgetall(keys.room_places).items()}
        by_place = sorted(shoppers, key=lambda s: places[s.pk])
        token = activity_token_ensure(activity_id=activity.pk)
        for shopper in by_place[:2]:
            ticket = client_of(shopper).post(f"/api/activities/{activity.pk}/room/ticket").json()["ticket"]
            assert buy(activity, client_of(shopper), token, ticket=ticket).status_code == 202
        # Still nobody polling: beat records the close, dated at the last unit's reservation.
        closed_ms = wait_until(lambda: _room_field(activity, "closed_ms"), timeout=30, what="beat to close the room")
        last_unit_ms = max(int(r.split(b"-", 1)[0]) for r in stock_redis().hvals(keys.users))
        assert 0 <= closed_ms - last_unit_ms <= 1000, closed_ms - last_unit_ms
    finally:
        beat.stop()
    # Every waiting shopper is told: the status says sold out, the ticket endpoint 410.
    closed = room_status(snapshot_of(activity), now=timezone.now(), fresh=True)
    assert (closed.state, closed.sold_out) == ("closed", True)
    assert int(closed.closed_at.timestamp() * 1000) == closed_ms
    for waiting in by_place[2:]:
        answer = client_of(waiting).post(f"/api/activities/{activity.pk}/room/ticket")
        assert (answer.status_code, answer.json()["code"]) == (410, "sold_out")


def test_a_ticket_is_good_again_after_a_busy_answer_and_used_by_the_reservation(redis_spy):
    activity = room_sale(stock=5)
    (alice,) = make_users(1, prefix="retry")
    a = client_of(alice)
    token = activity_token_ensure(activity_id=activity.pk)
    ticket = admitted_ticket(activity, a)
    keys = ActivityKeys(activity.pk)
    # The stock is away for a moment (as after a Redis restart, before the re-warm): busy.
    stock_redis().rename(keys.stock, f"{keys.stock}:away")
    refused = buy(activity, a, token, ticket=ticket)
    assert (refused.status_code, refused.json()["code"]) == (503, "busy")
    # The same ticket is answered again, within its window, and buys once the stock is back.
    again = a.post(f"/api/activities/{activity.pk}/room/ticket")
    assert again.status_code == 200 and again.json()["ticket"] == ticket
    stock_redis().rename(f"{keys.stock}:away", keys.stock)
    assert buy(activity, a, token, ticket=ticket).status_code == 202
    # The reservation used it for good: refused before the stock script.
    redis_spy.clear()
    used = buy(activity, a, token, ticket=ticket)
    assert (used.status_code, used.json()["code"]) == (403, "ticket_used")
    assert stock_script_calls(redis_spy) == 0
    assert a.post(f"/api/activities/{activity.pk}/room/ticket").json()["code"] == "ticket_used"
    assert int(stock_redis().get(keys.stock)) == 4


def test_a_ticket_in_two_purchases_at_once_buys_once():
    activity = room_sale(stock=5)
    (bob,) = make_users(1, prefix="twice")
    ticket = admitted_ticket(activity, client_of(bob))
    snapshot, now = snapshot_of(activity), timezone.now()
    # Two purchases past the gate before either reached the stock script: both pass ...
    room_ticket_check(snapshot, user_id=bob.pk, ticket=ticket, now=now)
    room_ticket_check(snapshot, user_id=bob.pk, ticket=ticket, now=now)
    # ... and the stock script's participant check lets one reserve.
    purchase_reserve(activity=snapshot, user_id=bob.pk, quantity=1)
    with pytest.raises(ApiError) as second:
        purchase_reserve(activity=snapshot, user_id=bob.pk, quantity=1)
    assert (second.value.status, second.value.code) == (409, "duplicate")
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 4


def test_the_ticket_endpoints_expected_refusals_are_not_logged(caplog):
    activity = room_sale(stock=5, room_rate=1, room_cap=1)
    first, second = make_users(2, prefix="quiet")
    admitted_ticket(activity, client_of(first))
    c2 = client_of(second)
    with caplog.at_level(logging.INFO, logger="django.request"):
        assert c2.post(f"/api/activities/{activity.pk}/room/ticket").json()["code"] == "not_joined"
        c2.post(f"/api/activities/{activity.pk}/room/join")
        assert c2.post(f"/api/activities/{activity.pk}/room/ticket").json()["code"] == "not_admitted"
    assert [r for r in caplog.records if r.name == "django.request"] == []


def test_the_sale_pages_button_leads_to_the_room_in_both_languages(client):
    activity = room_sale(stock=3)
    english = client.get(f"/seckill/{activity.pk}/").content.decode()
    assert f'id="buy" class="buy" type="button" data-room-url="/seckill/{activity.pk}/room/"' in english
    assert "Join the queue" in english
    chinese = client.get(f"/zh-hans/seckill/{activity.pk}/").content.decode()
    assert f'data-room-url="/zh-hans/seckill/{activity.pk}/room/"' in chinese and ">排队</button>" in chinese


def test_create_activity_makes_a_room_sale_and_seed_demo_has_one():
    out = StringIO()
    call_command(
        "create_activity",
        "--title=Roomy",
        "--product-name=Roomy thing",
        "--price=9.00",
        "--seckill-price=1.00",
        "--stock=7",
        "--start=+600",
        "--end=+3600",
        "--admission=room",
        "--prequeue-minutes=30",
        "--admission-rate=5",
        "--admission-cap=9",
        "--admission-window=60",
        stdout=out,
    )
    made = Activity.objects.get(pk=json.loads(out.getvalue())["id"])
    assert (made.admission_mode, made.room_prequeue_minutes, made.room_rate, made.room_cap) == ("room", 30, 5, 9)
    assert made.room_window_seconds == 60
    call_command("seed_demo", "--json", stdout=StringIO())
    call_command("seed_demo", "--json", stdout=StringIO())  # again: still one
    assert Activity.objects.filter(title__startswith="Demo", admission_mode="room").count() == 1
