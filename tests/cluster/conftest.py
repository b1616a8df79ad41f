"""A real local Redis Cluster: three redis-server masters on loopback ports, formed with
``redis-cli --cluster create`` (Debian's redis-server and redis-cli; ``.ci/run`` installs
them on a new machine). Started once per test module, flushed before each test."""

import shutil
import subprocess

import pytest
import redis

from seckill.redis_client import reset_stock_redis

from ..drills.infra import RedisServer
from ..helpers import wait_until

MASTERS = 3


def cluster_port() -> int:
    """A free port below 55536 whose cluster bus port (+10000) is free too."""
    import random
    import socket

    while True:
        port = random.randint(20000, 45000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


class LocalCluster:
    def __init__(self, log_dir):
        self.nodes = [
            RedisServer(
                cluster_port(),
                log_dir,
                name=f"cluster-node-{i}",
                extra=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    f"nodes-{i}.conf",
                    "--cluster-node-timeout",
                    "5000",
                    "--databases",
                    "1",
                ],
            )
            for i in range(MASTERS)
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> "LocalCluster":
        for node in self.nodes:
            node.start()
        redis_cli = shutil.which("redis-cli")
        assert redis_cli, "redis-cli is missing: install Debian's redis-server (see .ci/run)"
        subprocess.run(
            [redis_cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        wait_until(self._ok, timeout=60, what="the cluster to be ok on every node")
        return self

    def _ok(self) -> bool:
        for node in self.nodes:
            if redis.Redis(port=node.port).cluster("INFO").get("cluster_state") != "ok":
                return False
        return True

    def flush(self) -> None:
        for node in self.nodes:
            redis.Redis(port=node.port).flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def on_cluster(redis_cluster, settings):
    """This test's stock engine is the cluster; returns the environment for the
    processes it starts."""
    redis_cluster.flush()
    settings.SECKILL_REDIS_CLUSTER = True
    settings.SECKILL_REDIS_URL = redis_cluster.url
    reset_stock_redis()
    yield {"SECKILL_REDIS_CLUSTER": "true", "SECKILL_REDIS_URL": redis_cluster.url}
    reset_stock_redis()
