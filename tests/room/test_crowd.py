"""20,000 shoppers through the waiting room over HTTP (real gunicorn, a real Celery worker):
5,000 join in the pre-queue, 15,000 after the start. Places are unique, the pre-queue's are
the published draw, later ones arrival order; the room lets shoppers in in place order, once
each; 500 units sell exactly, and the room closes within a second of the last one (from the
times Redis recorded)."""

import http.client
import json
import threading
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token

from orders.models import Order
from seckill.models import Activity
from seckill.purchase.token_cache import token_shared_fill
from seckill.room.draw import commitment_of, draw_order
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_users
from ..helpers import start_celery_worker, start_gunicorn, subprocess_env, wait_until
from .conftest import room_sale

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PRE, LATE, STOCK, THREADS = 5_000, 15_000, 500, 6


class Client:
    """One keep-alive HTTP connection."""

    def __init__(self, base: str):
        parts = urlsplit(base)
        self.host, self.port = parts.hostname, parts.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def call(self, method: str, path: str, *, key: str | None = None, body=None):
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Token {key}"
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                raw = response.read()
                return response.status, json.loads(raw or b"null")
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt:
                    raise
        raise AssertionError("unreachable")


def in_threads(chunks, work):
    results, errors = [None] * len(chunks), []

    def run(i, chunk):
        try:
            results[i] = work(chunk)
        except Exception as exc:  # the test fails with it below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(chunks)]
    for t in threads:
        t.start()
    return threads, results, errors


def test_20000_shoppers_through_the_room(process_logs, request):
    users = make_users(PRE + LATE, prefix="crowd")
    keys = dict(Token.objects.values_list("user_id", "key"))
    token_shared_fill()  # the crowd's first requests need no database lookup
    activity = room_sale(
        stock=STOCK,
        started=False,
        room_rate=2000,
        room_cap=300,
        room_window_seconds=60,
        room_prequeue_minutes=90,
        start_at=timezone.now() + timedelta(hours=1),
    )
    room_keys = ActivityKeys(activity.pk)
    env = subprocess_env(SECKILL_ROOM_JOINS_PER_IP="off", SECKILL_ACTIVITY_CACHE_TTL="0.5")
    server, base = start_gunicorn(process_logs, workers=2, threads=8, env=env)
    request.addfinalizer(server.stop)
    worker = start_celery_worker(process_logs, concurrency=1)
    request.addfinalizer(worker.stop)
    try:
        room = f"/api/activities/{activity.pk}/room"
        pre, late = users[:PRE], users[PRE:]

        def join_all(chunk):
            client, answers = Client(base), []
            for u in chunk:
                status, body = client.call("POST", f"{room}/join", key=keys[u.pk])
                answers.append((u.pk, status, body.get("place") if isinstance(body, dict) else None))
            return answers

        threads, results, errors = in_threads([pre[i::THREADS] for i in range(THREADS)], join_all)
        for t in threads:
            t.join(300)
        assert not errors, errors
        odd = [a for chunk in results for a in chunk if a[1] != 200 or a[2] is not None]
        assert not odd, odd[:5]
        commitment = Client(base).call("GET", f"{room}/draw")[1]["commitment"]

        # The start.
        Activity.objects.filter(pk=activity.pk).update(start_at=timezone.now())
        probe = Client(base)
        wait_until(lambda: probe.call("GET", room)[1]["state"] == "open", timeout=30, what="the draw")

        places: dict[int, int] = {}
        sold, bought, refused = threading.Event(), [], []

        def rejoin_then_join(chunk):
            answers = join_all(chunk)
            for uid, status, place in answers:
                if status == 200:
                    places[place] = uid
            return answers

        def buyer(parity):
            client, done, token = Client(base), 0, None
            while True:
                status = client.call("GET", room)[1]
                serving = status["now_serving"]
                for place in range(done + 1, serving + 1):
                    if place % 2 != parity:
                        continue
                    owner = wait_until(lambda p=place: places.get(p), timeout=120, what=f"place {place}'s owner")
                    code, ticket = client.call("POST", f"{room}/ticket", key=keys[owner])
                    if code != 200:
                        refused.append((owner, ticket))
                        continue
                    if token is None:
                        token = client.call("GET", f"/api/activities/{activity.pk}/flag")[1]["token"]
                    code, answer = client.call(
                        "POST",
                        f"/api/activities/{activity.pk}/purchase",
                        key=keys[owner],
                        body={"token": token, "ticket": ticket["ticket"]},
                    )
                    (bought if code == 202 else refused).append((owner, answer))
                done = serving
                if status["sold_out"] and status["state"] == "closed" and sold.is_set():
                    return
                if status["sold_out"]:
                    sold.set()  # one more round: whoever was let in before the close is served

        # Pre-queue shoppers come back for their place; the rest arrive, all while buyers buy.
        chunks = [pre[i::THREADS] + late[i::THREADS] for i in range(THREADS)]
        threads, results, errors = in_threads(chunks, rejoin_then_join)
        buyers, _, buyer_errors = in_threads([0, 1], buyer)
        for t in threads + buyers:
            t.join(600)
        assert not errors and not buyer_errors, (errors, buyer_errors)
    finally:
        server.stop()

    client = stock_redis()
    # Places: unique, 1..5,000 the draw, then arrival order.
    answers = [a for chunk in results for a in chunk]
    assert all(status == 200 for _, status, _ in answers)
    assert sorted(p for _, _, p in answers) == list(range(1, PRE + LATE + 1))
    for chunk in results:  # each connection's later joins arrived in order: increasing places
        late_places = [p for uid, _, p in chunk if p > PRE]
        assert late_places == sorted(late_places)
    queue = [int(u) for u in client.lrange(room_keys.room_queue, 0, -1)]
    seed = client.hget(room_keys.room_state, "seed").decode()
    assert commitment_of(seed) == commitment
    assert queue[:PRE] == draw_order(seed, sorted(u.pk for u in pre))
    assert {queue[p - 1]: p for p in range(1, len(queue) + 1)} == {uid: p for uid, _, p in answers}

    # Admission in place order, nobody twice.
    serving = int(client.hget(room_keys.room_state, "serving"))
    admitted = {int(k): int(v) for k, v in client.hgetall(room_keys.room_admitted).items()}
    assert set(admitted) == set(queue[:serving]) and len(admitted) == serving
    times = [admitted[uid] for uid in queue[:serving]]
    assert times == sorted(times)
    assert len(bought) == len({uid for uid, _ in bought}) == STOCK
    assert {uid for uid, _ in bought} <= set(queue[:serving])
    assert all(answer["code"] in ("sold_out", "admission_expired") for _, answer in refused), refused[:5]

    # Exactly the stock sold, and the room closed within a second of the last unit.
    assert int(client.get(room_keys.stock)) == 0
    reservations = [v.decode() for v in client.hvals(room_keys.users)]
    assert len(reservations) == STOCK
    last_unit_ms = max(int(r.split("-", 1)[0]) for r in reservations)
    closed_ms = int(client.hget(room_keys.room_state, "closed_ms"))
    assert 0 <= closed_ms - last_unit_ms <= 1000, closed_ms - last_unit_ms
    print(f"room closed {closed_ms - last_unit_ms} ms after the last unit; {serving} let in for {STOCK} units")
    wait_until(lambda: Order.objects.filter(activity=activity).count() == STOCK, timeout=120, what="the orders")
    worker.stop()
    assert Order.objects.filter(activity=activity).count() == STOCK
