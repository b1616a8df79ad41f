"""Real infrastructure the drills start, break and bring back: a redis-server of their
own, a TCP proxy in front of PostgreSQL that can be cut, Celery beat; and the
invariants every drill ends with."""

from __future__ import annotations

import shutil
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.db.models import Count, Sum

from devtools.embedded import redis_server_binary
from inventory.models import StockMovement
from orders.models import AnomalyOrder, Order
from seckill.sale.reconciliation import reconcile

from ..helpers import BIN, Process, purchase, wait_until


class RedisServer:
    """A redis-server on a fixed loopback port that keeps nothing on disk, so a restart
    comes back empty, as a crashed cache node does."""

    def __init__(self, port: int, log_dir: Path, name: str = "redis", extra: list[str] | None = None):
        self.port, self.log_dir, self.name, self.extra = port, log_dir, name, extra or []
        self.process: Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        data = self.log_dir / f"{self.name}-data"
        data.mkdir(exist_ok=True)
        argv = [
            redis_server_binary(),
            "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
            "--dir", str(data), "--databases", "16", *self.extra,
        ]  # fmt: skip
        self.process = Process(self.name, argv, {"PATH": "/usr/bin:/bin"}, self.log_dir).start()
        wait_until(self._answers, timeout=30, what=f"{self.name} on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


class TcpProxy:
    """Forwards a loopback port to another; ``cut()`` closes the listener and every
    connection (the database is gone for whoever is behind it), ``restore()`` listens again."""

    def __init__(self, target_port: int, listen_port: int):
        self.target_port, self.port = target_port, listen_port
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    restore = start

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self._listener is not listener:  # cut while this connection was arriving
                client.close()
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in its thread
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    stop = cut


class Supervisor:
    """Restarts a process whenever it exits, as systemd's Restart=always or Kubernetes do."""

    def __init__(self, process: Process):
        self.process, self.restarts = process, 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            if not self.process.alive():
                self.restarts += 1
                self.process.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        self.process.stop()


def start_celery_beat(log_dir: Path, *, env: dict) -> Process:
    argv = [
        str(BIN / "celery"), "-A", "config", "beat", "--loglevel", "INFO",
        "--schedule", str(log_dir / "celerybeat-schedule"),
    ]  # fmt: skip
    process = Process("beat", argv, env, log_dir).start()
    wait_until(lambda: "beat: Starting" in process.log() or not process.alive(), timeout=60, what="beat to start")
    assert process.alive(), f"beat died:\n{process.log()[-3000:]}"
    return process


# --- shoppers --------------------------------------------------------------------------


def purchase_answer(base: str, activity_id: int, key: str, token: str) -> tuple[int, str]:
    """One purchase as the drills' answer book records it: (status, code)."""
    status, body, _ = purchase(base, activity_id, key, token)
    return status, body["code"]


def crowd(base: str, activity_id: int, token: str, users: list, keys: dict) -> dict[int, tuple[int, str]]:
    """Every user buys once, concurrently; returns user id -> (status, code)."""
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = pool.map(lambda u: purchase_answer(base, activity_id, keys[u.pk], token), users)
        return {u.pk: a for u, a in zip(users, answers, strict=True)}


def units_ordered(activity) -> int:
    return Order.objects.filter(activity=activity).aggregate(u=Sum("quantity"))["u"] or 0


def assert_nothing_lost_nothing_doubled(activity, answers: dict[int, tuple[int, str]], *, timeout: float = 120):
    """Every 202 became exactly one order, no order without a 202, no shopper with two
    orders, every unit deducted once, no anomaly, and both identities hold."""
    accepted = {user for user, (status, _) in answers.items() if status == 202}
    wait_until(lambda: units_ordered(activity) >= len(accepted), timeout=timeout, what="every reservation's order")
    orders = Order.objects.filter(activity=activity)
    assert set(orders.values_list("user_id", flat=True)) == accepted, "an order lost or made up"
    assert orders.count() == len(accepted), "an order doubled"
    assert not orders.values("user").annotate(n=Count("id")).filter(n__gt=1).exists(), "a shopper has two orders"
    deducted = StockMovement.objects.filter(activity=activity, kind="deduct").aggregate(u=Sum("quantity"))["u"]
    assert deducted == len(accepted)
    assert not AnomalyOrder.objects.filter(activity=activity).exists(), list(AnomalyOrder.objects.values())
    report = wait_until(
        lambda: (r := reconcile(activity_id=activity.pk))["identity_ok"] and r["reserved_not_ordered"] == 0 and r,
        timeout=60,
        what="the identities to hold",
    )
    return report


# --- a real local Redis Cluster ------------------------------------------------------------


def cluster_port() -> int:
    """A free port below 55536 whose cluster bus port (+10000) is free too."""
    import random

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
    """Three redis-server masters on loopback ports, formed with ``redis-cli --cluster
    create`` (Debian's redis-server and redis-cli; ``.ci/run`` installs them on a new
    machine). The ``redis_cluster`` and ``on_cluster`` fixtures (tests/conftest.py)."""

    MASTERS = 3

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
            for i in range(self.MASTERS)
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> LocalCluster:
        import subprocess

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
        import redis

        for node in self.nodes:
            if redis.Redis(port=node.port).cluster("INFO").get("cluster_state") != "ok":
                return False
        return True

    def flush(self) -> None:
        import redis

        for node in self.nodes:
            redis.Redis(port=node.port).flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
