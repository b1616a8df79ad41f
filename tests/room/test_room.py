"""The waiting room's behaviour against real Redis: one place per account, the pre-queue's
draw checkable from the published seed, no-shows, the cap, closing on sell-out and
reopening, pause and resume, joins limited per address."""

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from seckill.models import Activity
from seckill.room.draw import draw_order
from seckill.room.queue import room_pause
from seckill.room.status import room_status
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import run_release

from ..factories import make_users, token_of
from ..helpers import gate_window_room, wait_until
from .conftest import room_sale, snapshot_of

pytestmark = pytest.mark.django_db(transaction=True)


def client_of(user, address: str = "127.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    return client


def status(activity):
    return room_status(snapshot_of(activity), now=timezone.now(), fresh=True)


def join(activity, user):
    answer = client_of(user).post(f"/api/activities/{activity.pk}/room/join")
    assert answer.status_code == 200, answer.json()
    return answer.json()


def ticket(activity, user):
    return client_of(user).post(f"/api/activities/{activity.pk}/room/ticket")


def test_pre_queue_drawn_from_the_committed_seed_then_first_come_first_served():
    activity = room_sale(stock=50, started=False, room_rate=1, room_prequeue_minutes=120)
    users = make_users(40, prefix="draw")
    early, late = users[:30], users[30:]
    for u in early:
        body = join(activity, u)
        assert (body["place"], body["pre_queue"]) == (None, True)
    assert join(activity, early[0])["place"] is None  # again: still in the pre-queue, once
    before = APIClient().get(f"/api/activities/{activity.pk}/room/draw").json()
    assert before["seed"] is None and len(before["commitment"]) == 64
    assert status(activity).state == "pre_queue"

    # The start (moved to now: however slow the machine, every early joiner joined before it).
    Activity.objects.filter(pk=activity.pk).update(start_at=timezone.now())
    places = {u.pk: join(activity, u)["place"] for u in early}
    late_places = [join(activity, u)["place"] for u in late]
    assert late_places == list(range(31, 41))  # arrival order, behind the pre-queue
    assert {u.pk: join(activity, u)["place"] for u in early} == places  # the same place again

    draw = APIClient().get(f"/api/activities/{activity.pk}/room/draw").json()
    assert draw["commitment"] == before["commitment"] == hashlib.sha256(draw["seed"].encode()).hexdigest()
    assert draw["joiners"] == sorted(u.pk for u in early)
    expected = draw_order(draw["seed"], draw["joiners"])
    assert [uid for uid, _ in sorted(places.items(), key=lambda kv: kv[1])] == expected
    assert sorted(places.values()) == list(range(1, 31))
    assert Activity.objects.get(pk=activity.pk).room_seed == draw["seed"]
    assert status(activity).seed == draw["seed"]


def test_no_shows_expire_and_free_their_slot_within_the_cap():
    # A window long enough for the first to be seen admitted and take its ticket on a busy
    # machine (1 s was not, now and then), short enough to end within the wait below.
    activity = room_sale(stock=10, room_cap=1, room_window_seconds=3)
    first, second = make_users(2, prefix="noshow")
    join(activity, first)
    join(activity, second)
    wait_until(lambda: status(activity).now_serving >= 1, timeout=10, what="the first admission")
    assert status(activity).now_serving == 1  # the cap: one admitted and not done
    assert ticket(activity, first).status_code == 200
    # The first never buys: their window ends, the second is let in.
    wait_until(lambda: status(activity).now_serving == 2, timeout=20, what="the no-show to expire")
    assert status(activity).noshows >= 1
    late = ticket(activity, first)
    assert (late.status_code, late.json()["code"]) == (403, "admission_expired")
    assert ticket(activity, second).status_code == 200


def test_the_room_closes_on_sell_out_and_reopens_when_units_come_back():
    from seckill.sale.activities import activity_token_ensure

    activity = room_sale(stock=1, room_cap=0)
    a, b, c = make_users(3, prefix="close")
    for u in (a, b, c):
        join(activity, u)
    # Stock-aware: one unit, so one shopper is let in at a time, whatever the rate.
    wait_until(lambda: status(activity).now_serving == 1, timeout=10, what="an admission")
    assert status(activity).now_serving == 1
    token = activity_token_ensure(activity_id=activity.pk)
    issued = ticket(activity, a).json()["ticket"]
    bought = client_of(a).post(
        f"/api/activities/{activity.pk}/purchase", {"token": token, "ticket": issued}, format="json"
    )
    assert bought.status_code == 202
    closed = status(activity)
    assert (closed.state, closed.sold_out) == ("closed", True)
    assert closed.closed_at is not None
    refused = ticket(activity, b)  # a waiting shopper is told it is sold out
    assert (refused.status_code, refused.json()["code"]) == (410, "sold_out")

    # The unit comes back (the reservation released, as a failed order would be).
    keys = ActivityKeys(activity.pk)
    reservation = stock_redis().hget(keys.users, a.pk).decode()
    assert run_release(
        stock_redis(),
        keys,
        reservation_id=reservation,
        user_id=a.pk,
        quantity=1,
        free_participant=False,
        reason="test",
    )
    wait_until(lambda: status(activity).now_serving == 2, timeout=10, what="the room to reopen")
    reopened = status(activity)
    assert (reopened.state, reopened.sold_out, reopened.closed_at) == ("open", False, None)
    assert ticket(activity, b).status_code == 200  # the next place in order


def test_pause_and_resume():
    activity = room_sale(stock=10, room_rate=1000)
    a, b = make_users(2, prefix="pause")
    room_pause(activity.pk, paused=True)
    join(activity, a)
    join(activity, b)
    paused = status(activity)
    assert (paused.state, paused.now_serving) == ("paused", 0)
    room_pause(activity.pk, paused=False)
    wait_until(lambda: status(activity).now_serving == 2, timeout=10, what="admissions after resuming")


def test_joins_are_limited_per_address(settings):
    settings.SECKILL_ROOM_JOINS_PER_IP = "2/h"
    activity = room_sale(stock=10)
    users = make_users(4, prefix="perip")
    gate_window_room(3600)  # the count must not start again mid-test
    answers = [client_of(u, "203.0.113.7").post(f"/api/activities/{activity.pk}/room/join") for u in users[:3]]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json()["code"] == "rate_limited"
    assert client_of(users[3], "203.0.113.8").post(f"/api/activities/{activity.pk}/room/join").status_code == 200


def test_hostile_input_is_a_clear_4xx():
    activity = room_sale(stock=1)
    (u,) = make_users(1, prefix="hostile")
    assert APIClient().post(f"/api/activities/{activity.pk}/room/join").status_code == 401
    assert client_of(u).post("/api/activities/999999/room/join").status_code == 404
    assert APIClient().get("/api/activities/999999/room").status_code == 404
    assert client_of(u).get(f"/api/activities/{activity.pk}/room/join").status_code == 405
    ended = room_sale(
        stock=1, end_at=timezone.now() - timedelta(seconds=1), start_at=timezone.now() - timedelta(hours=1)
    )
    refused = client_of(u).post(f"/api/activities/{ended.pk}/room/join")
    assert (refused.status_code, refused.json()["code"]) == (403, "ended")
    later = room_sale(stock=1, started=False, room_prequeue_minutes=5)
    refused = client_of(u).post(f"/api/activities/{later.pk}/room/join")
    assert (refused.status_code, refused.json()["code"]) == (403, "room_not_open")


def test_an_ended_room_keeps_its_seed_and_writes_nothing_to_redis():
    from seckill.sale.snapshot import activity_snapshot_forget

    activity = room_sale(stock=5)
    (u,) = make_users(1, prefix="ended")
    join(activity, u)
    seed = status(activity).seed
    assert seed and Activity.objects.get(pk=activity.pk).room_seed == seed
    # The sale ends and its keys go (as the close does).
    Activity.objects.filter(pk=activity.pk).update(
        end_at=timezone.now() - timedelta(milliseconds=1), start_at=timezone.now() - timedelta(hours=1)
    )
    activity_snapshot_forget(activity.pk)
    for key in stock_redis().scan_iter(match=f"*{ActivityKeys(activity.pk).tag}*"):
        stock_redis().delete(key)
    ended = status(activity)
    assert (ended.state, ended.seed, ended.commitment) == ("ended", seed, hashlib.sha256(seed.encode()).hexdigest())
    draw = APIClient().get(f"/api/activities/{activity.pk}/room/draw").json()
    assert draw["seed"] == seed
    assert list(stock_redis().scan_iter(match=f"*{ActivityKeys(activity.pk).tag}*")) == []
