"""A flood through the real server (gunicorn, uvicorn workers) on keep-alive connections:
every request gets its answer on the connection it was sent on. A server that answers
before reading the body must read it or say ``Connection: close``; closing silently makes
a client that reuses the connection read an empty socket (a transport error)."""

import asyncio
import json

import pytest

from ..factories import make_activity, make_users, token_of
from ..helpers import start_gunicorn, subprocess_env

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
        pytest.param("1", id="answered-at-the-front"),  # the production memory: the front knows
        pytest.param("0", id="answered-by-django"),  # no memory: every request reaches the views
    ],
)
def test_a_flood_of_purchases_for_unknown_activities_gets_every_404_on_its_connection(process_logs, memory):
    """Every 100th request carries a body too large to come in one piece: answered before
    all of it is read, its answer must close the connection."""
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
    assert set(answers) == {(404, "not_found")}
