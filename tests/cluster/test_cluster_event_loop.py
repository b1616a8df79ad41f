"""What drill 1 found next: when a cluster node stops answering, redis-py's cluster client
learns the slot map again before the command fails, asking node after node, a timeout
each, and every thread that met the error waits its turn to ask again. On the server's
event loop (a purchase runs there) that held every connection of a web process for
seconds, and on the pool each purchase in turn, before the breaker could open. Real
cluster nodes, stopped with SIGSTOP as a cut network leaves them: connected, silent."""

import asyncio
import os
import signal
import threading

import pytest
import redis

from stock.redis_client import stock_redis

from ..helpers import wait_until

pytestmark = pytest.mark.slow


def _on_an_event_loop(command) -> None:
    async def purchase() -> None:
        command()

    asyncio.run(purchase())


@pytest.mark.parametrize("where", [_on_an_event_loop, lambda command: command()], ids=["event loop", "pool thread"])
def test_a_node_that_stops_answering_costs_the_command_not_the_relearning_of_the_slot_map(
    where, redis_cluster, on_cluster
):
    client = stock_redis()
    key = "seckill:{a0}:probe"
    assert client.set(key, 1)
    node = next(n for n in redis_cluster.nodes if n.port == client.get_node_from_key(key).port)
    relearning = client.nodes_manager._initialization_lock  # held by the test: no relearning can end
    failed: list[BaseException] = []

    def command() -> None:
        try:
            client.get(key)
        except redis.RedisError as exc:
            failed.append(exc)

    caller = threading.Thread(target=where, args=(command,), daemon=True)
    os.kill(node.process.proc.pid, signal.SIGSTOP)
    try:
        with relearning:
            caller.start()
            wait_until(lambda: not caller.is_alive(), timeout=30, what="the command to fail without the slot map")
            epoch = client.nodes_manager._epoch  # no relearning can have ended yet
    finally:
        os.kill(node.process.proc.pid, signal.SIGCONT)
    assert len(failed) == 1 and isinstance(failed[0], (redis.TimeoutError, redis.ConnectionError)), failed
    wait_until(lambda: client.nodes_manager._epoch != epoch, timeout=30, what="the slot map learnt again behind")
    assert client.get(key) == b"1"
