"""The web workers' HTTP protocol (config.workers.HttpToolsProtocol) sends an answer's
headers and body in one write: uvicorn writes them one after the other, and uvloop sends
each at once (two ``send`` calls and two TCP segments per answer)."""

import asyncio
import socket

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as UvicornHttpToolsProtocol
from uvicorn.server import ServerState

from config.workers import BatchAcceptLoop, HttpToolsProtocol

REQUEST = b"GET /%s HTTP/1.1\r\nHost: testserver\r\n\r\n"


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if scope["path"] == "/late":  # the body comes on a later turn of the loop
        for _ in range(3):
            await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": b'{"ok":true}'})


class Sends:
    """The real transport, counting the writes that reach it."""

    def __init__(self, transport):
        self.transport, self.count = transport, 0

    def write(self, data):
        self.count += 1
        self.transport.write(data)

    def __getattr__(self, name):
        return getattr(self.transport, name)


def _answers(protocol_class, paths: list[str]) -> tuple[list[bytes], int]:
    """Each path asked in turn on one keep-alive connection to a real server on the
    workers' loop: the answers read, and the writes that reached the transport."""
    loop = BatchAcceptLoop()
    counted: list[Sends] = []

    class Counting(protocol_class):
        def connection_made(self, transport):
            counted.append(Sends(transport))
            super().connection_made(counted[-1])

    config = Config(app=app, lifespan="off", log_config=None, access_log=False)
    config.load()
    state = ServerState()
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        server = loop.run_until_complete(
            loop.create_server(
                lambda: Counting(config=config, server_state=state, app_state={}, _loop=loop), sock=listener, backlog=16
            )
        )

        async def client() -> list[bytes]:
            reader, writer = await asyncio.open_connection(*listener.getsockname())
            answers = []
            for path in paths:
                writer.write(REQUEST % path.encode())
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                answers.append(head + await asyncio.wait_for(reader.readexactly(11), 10))
            writer.close()
            return answers

        answers = loop.run_until_complete(client())
        server.close()
        loop.run_until_complete(server.wait_closed())
        for connection in list(state.connections):
            connection.shutdown()
        loop.run_until_complete(asyncio.sleep(0))
        return answers, sum(c.count for c in counted)
    finally:
        listener.close()
        loop.close()


def test_each_answer_reaches_the_socket_in_one_write():
    answers, writes = _answers(HttpToolsProtocol, ["a", "b", "c"])
    assert writes == 3
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b'\r\n\r\n{"ok":true}')


def test_uvicorns_own_protocol_writes_twice_per_answer():
    """What the one write replaces (the measurement behind it: docs/BENCHMARKS.md)."""
    _read, writes = _answers(UvicornHttpToolsProtocol, ["a", "b", "c"])
    assert writes == 6


def test_headers_whose_body_comes_later_are_sent_at_the_end_of_their_turn():
    answers, writes = _answers(HttpToolsProtocol, ["late", "a"])
    assert writes == 3  # the headers alone, then the body; the next answer in one
    assert all(answer.endswith(b'\r\n\r\n{"ok":true}') for answer in answers)
