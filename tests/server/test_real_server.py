"""The real server (gunicorn, uvicorn workers, server.app) under a flood: every 202 becomes
an order, and on keep-alive connections every request gets its answer on the connection it
was sent on — a server that answered and then closed with bytes unread would reset the
connection, and a client could lose the answer."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from orders.models import Order
from seckill.purchase.token_cache import token_shared_remember
from seckill.sale.activities import activity_token_ensure

from ..factories import make_activity, make_users, token_of
from ..helpers import assert_identity, purchase, start_celery_worker, start_gunicorn, subprocess_env, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CONNECTIONS = 64
REQUESTS = 10_000


class KeepAliveClient:
    """An HTTP/1.1 client as browsers and pools are: one connection reused for request
    after request, a new one only after the server said ``Connection: close``."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reconnects = 0

    async def request(self, head: bytes, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.reconnects += 1
        assert self.reader is not None
        # The head and the body in two writes, as h11-based clients (httpx) send them: the
        # body may reach the server after it has decided its answer.
        self.writer.write(head)
        await self.writer.drain()
        self.writer.write(body)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")  # IncompleteReadError: the server closed on us
        status_line, *lines = head.decode("latin1").split("\r\n")
        headers = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.writer.close()
            self.writer = None
        return int(status_line.split()[1]), headers, body


async def _flood(port: int, requests: list[tuple[bytes, bytes]]) -> tuple[list[tuple[int, str]], list[str]]:
    answers: list[tuple[int, str]] = []
    errors: list[str] = []
    queue = list(reversed(requests))

    async def connection() -> None:
        client = KeepAliveClient("127.0.0.1", port)
        while queue:
            head, sent = queue.pop()
            try:
                status, _headers, body = await asyncio.wait_for(client.request(head, sent), timeout=60)
            except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                errors.append(type(exc).__name__)
                client.writer = None  # a new connection for the next request
                continue
            answers.append((status, json.loads(body).get("code", "")))

    await asyncio.gather(*(connection() for _ in range(CONNECTIONS)))
    return answers, errors


@pytest.mark.parametrize(
    "memory",
    [
        pytest.param("1", id="answered-from-memory"),  # the production memory: on the event loop
        pytest.param("0", id="answered-on-the-pool"),  # no memory: every request runs the checks
    ],
)
def test_a_flood_of_purchases_for_unknown_activities_gets_every_answer_on_its_connection(process_logs, memory):
    """Every 100th request carries a body over the purchase's cap (413): read to its end
    all the same, so the connection carries the next request and no answer is lost to a
    reset."""
    activity = make_activity(stock=5)
    key = token_of(make_users(1, prefix="flood")[0])
    env = subprocess_env(SECKILL_ACTIVITY_CACHE_TTL=memory)
    web, base = start_gunicorn(process_logs, workers=2, threads=8, env=env)
    try:
        port = int(base.rsplit(":", 1)[1])
        small = json.dumps({"token": "x" * 32, "quantity": 1}).encode()
        large = json.dumps({"token": "x" * 32, "quantity": 1, "pad": "y" * 256 * 1024}).encode()
        requests = []
        for i in range(REQUESTS):
            body = large if i % 100 == 99 else small
            path = f"/api/activities/{activity.pk + 1000 + i}/purchase"
            head = (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            requests.append((head, body))
        answers, errors = asyncio.run(_flood(port, requests))
    finally:
        web.stop()
    assert errors == []
    assert len(answers) == REQUESTS
    assert set(answers) == {(404, "not_found"), (413, "payload_too_large")}
    assert answers.count((413, "payload_too_large")) == REQUESTS // 100


def test_a_flood_through_the_real_server_keeps_every_202(process_logs):
    """The real server with the production memories and a real Celery worker: the drain
    requests a purchase on the loop makes reach the worker, every 202 becomes an order and
    no unit is sold twice."""
    stock, shoppers = 60, 150
    activity = make_activity(stock=stock)
    users = make_users(shoppers, prefix="inlineflood")
    token_shared_remember([(token_of(u), u.pk, u.username) for u in users[: shoppers // 2]])  # half in the shared cache
    env = subprocess_env(
        SECKILL_ACTIVITY_CACHE_TTL="1",
        SECKILL_BLACKLIST_CACHE_TTL="1",
        SECKILL_SOLD_OUT_TTL="1",
        SECKILL_DUPLICATE_TTL="1",
    )
    worker = start_celery_worker(process_logs, env=env)
    server, base = start_gunicorn(process_logs, workers=2, threads=4, env=env)
    try:
        keys = [token_of(u) for u in users]
        with ThreadPoolExecutor(max_workers=24) as threads:
            token = activity_token_ensure(activity_id=activity.pk)
            answers = list(threads.map(lambda key: purchase(base, activity.pk, key, token), keys))
        statuses = [status for status, _body, _headers in answers]
        assert statuses.count(202) == stock, statuses
        assert set(statuses) <= {202, 410}, statuses
        wait_until(
            lambda: Order.objects.filter(activity=activity).count() == stock,
            timeout=90,
            what="every 202's order, drained by the worker",
        )
        winners = {u.pk for u, (status, _b, _h) in zip(users, answers, strict=True) if status == 202}
        assert set(Order.objects.filter(activity=activity).values_list("user_id", flat=True)) == winners
        assert_identity(activity)
    finally:
        server.stop()
        worker.stop()
