"""The web workers' event loop (config.workers.BatchAcceptLoop) accepts several waiting
connections at each turn (ACCEPT_PER_TURN). uvloop's own server accepts one per turn (libuv#3696): a worker busy
with a hundred connections turns about ten times a second, so at a sale's start the rest
of the flood's new connections waited seconds for their first answer."""

import asyncio
import socket

import pytest

from config.workers import ACCEPT_PER_TURN, BatchAcceptLoop, BatchAcceptServer

WAITING = 100


class Counted(asyncio.Protocol):
    made: list[asyncio.Transport]

    def connection_made(self, transport):
        self.made.append(transport)
        transport.write(b"hello")


def _listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def _turn(loop) -> None:
    """One turn of the loop: poll once, run what is ready."""
    loop.call_soon(loop.stop)
    loop.run_forever()


def _connections_made_in_turns(loop_class, turns: int) -> int:
    loop = loop_class()
    listener = _listening()
    made: list[asyncio.Transport] = []
    Counted.made = made
    clients = []
    try:
        server = loop.run_until_complete(loop.create_server(Counted, sock=listener, backlog=128))
        # The kernel completes the handshakes by itself: all of them wait to be accepted.
        clients = [socket.create_connection(listener.getsockname()) for _ in range(WAITING)]
        for _ in range(turns):
            _turn(loop)
        count = len(made)
        server.close()
        for transport in made:
            transport.close()
        loop.run_until_complete(server.wait_closed())
        return count
    finally:
        for client in clients:
            client.close()
        listener.close()
        loop.close()


def test_each_turn_of_the_loop_accepts_several_waiting_connections():
    # ACCEPT_PER_TURN a turn; each one's transport is made in the next two turns.
    turns = -(-WAITING // ACCEPT_PER_TURN) + 2
    assert _connections_made_in_turns(BatchAcceptLoop, turns=turns) == WAITING


def test_each_accepted_connection_is_served_by_uvloops_transport():
    loop = BatchAcceptLoop()
    listener = _listening()
    made: list[asyncio.Transport] = []
    Counted.made = made

    async def exchange():
        server = await loop.create_server(Counted, sock=listener, backlog=16)
        assert isinstance(server, BatchAcceptServer) and server.sockets == (listener,)
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        greeting = await asyncio.wait_for(reader.readexactly(5), 30)
        accepted = made[0].get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        writer.close()
        server.close()
        await server.wait_closed()
        return greeting

    try:
        assert loop.run_until_complete(exchange()) == b"hello"
        assert len(made) == 1
    finally:
        for transport in made:
            transport.close()
        listener.close()
        loop.close()


@pytest.mark.parametrize("how", ["host and port", "unix socket"])
def test_other_servers_are_uvloops_own(how, tmp_path):
    loop = BatchAcceptLoop()
    try:
        if how == "host and port":
            server = loop.run_until_complete(loop.create_server(asyncio.Protocol, "127.0.0.1", 0))
        else:
            server = loop.run_until_complete(loop.create_unix_server(asyncio.Protocol, str(tmp_path / "s")))
        assert not isinstance(server, BatchAcceptServer)
        server.close()
        loop.run_until_complete(server.wait_closed())
    finally:
        loop.close()
