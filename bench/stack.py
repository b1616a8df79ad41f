"""The system under test: production settings, nginx in front of gunicorn, and Celery
worker(s) on this machine.

The embedded PostgreSQL and Redis start when DATABASE_URL / REDIS_URL are unset; the
bench then uses its own database (``seckill_bench``, recreated each run) and its own
Redis databases, so a `make run` or a test run beside it is left alone. nginx is the
repository's configuration (deploy/nginx/shop.conf, rendered by devtools/nginx.py), one
for the project's gunicorn and one for each server of the yardstick.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from devtools import embedded
from devtools import nginx as nginx_conf

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BENCH_DB = "seckill_bench"
BENCH_REDIS_DB, BENCH_BROKER_DB = 6, 7


def _with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


def bench_environment(base: dict[str, str] | None = None) -> tuple[dict[str, str], set[str]]:
    """The environment of every bench process, and which embedded servers it started."""
    env = dict(os.environ if base is None else base)
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.production"
    env.setdefault("DJANGO_SECRET_KEY", "bench-only-secret-key-not-for-production-0123456789abcdef")
    env.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
    env["DJANGO_SECURE_SSL_REDIRECT"] = "false"
    env.setdefault("EMAIL_URL", "consolemail://")  # production requires one; the bench sends none
    env["SECKILL_BENCH_VIEWS"] = "true"
    env.setdefault("SECKILL_ALLOW_VOLATILE_REDIS", "true")  # a benchmark, whatever Redis it is given
    env.setdefault("DJANGO_LOG_LEVEL", "WARNING")
    # Behind nginx, as `make run` and production: the client's address is the one nginx
    # writes into X-Forwarded-For (straight at gunicorn, without the header, the socket's).
    env.setdefault("SECKILL_TRUSTED_PROXY_HEADER", "X-Forwarded-For")
    env.setdefault("SECKILL_TRUSTED_PROXY_COUNT", "1")
    env["PYTHONUNBUFFERED"] = "1"
    before = embedded.running_services()
    embedded_db = not env.get("DATABASE_URL")
    embedded_redis = not env.get("REDIS_URL")
    env.update(embedded.ensure_services(env))
    started = embedded.running_services() - before
    if embedded_db:
        _recreate_database(env["DATABASE_URL"])
        env["DATABASE_URL"] = _with_path(env["DATABASE_URL"], f"/{BENCH_DB}")
    if embedded_redis:
        import redis

        env["REDIS_URL"] = _with_path(env["REDIS_URL"], f"/{BENCH_REDIS_DB}")
        env.setdefault("CELERY_BROKER_URL", _with_path(env["REDIS_URL"], f"/{BENCH_BROKER_DB}"))
        for url in (env["REDIS_URL"], env["CELERY_BROKER_URL"]):
            redis.Redis.from_url(url).flushdb()
    env.setdefault("CELERY_BROKER_URL", env["REDIS_URL"])  # the settings' default too
    return env, started


def redis_facts(url: str) -> str:
    """Which Redis the run measured: its version, allocator and append-only setting."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        info = client.info()
    except redis.RedisError as exc:
        return f"unknown ({exc})"
    finally:
        client.close()
    aof = "appendonly yes" if info.get("aof_enabled") else "appendonly no"
    return f"Redis {info.get('redis_version')}, {info.get('mem_allocator')}, {aof}"


def redis_aof_compacted(urls: list[str], *, timeout: float = 300) -> list[str]:
    """What docs/OPERATIONS.md asks before a sale, after the token fill: each Redis of
    ``urls`` (once each, however many names it has) that keeps an append-only file rewrites
    it now (``BGREWRITEAOF``), and this waits for the rewrites to end. A run then starts with
    the file at its smallest, and none of the Redis's own rewrites (a fork, and the whole
    dataset written again beside the purchases) starts during it: the embedded Redis, kept
    from one run to the next, had grown to its 1 GB trigger and rewrote at the start of a
    round. Returns the addresses of the Redis servers rewritten."""
    import redis

    compacted, seen = [], set()
    for url in urls:
        address = urlsplit(url).netloc.rpartition("@")[2]  # no password in what is said
        client = redis.Redis.from_url(url)
        try:
            info = client.info()
            if info["run_id"] in seen or not info.get("aof_enabled"):
                continue
            seen.add(info["run_id"])
            try:
                client.bgrewriteaof()
            except redis.ResponseError as exc:  # one running already: waited for as well
                if "already in progress" not in str(exc):
                    raise
            deadline = time.monotonic() + timeout
            while True:
                persistence = client.info("persistence")
                if not persistence["aof_rewrite_in_progress"] and not persistence["aof_rewrite_scheduled"]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the append-only rewrite of {address} took over {timeout:.0f} s")
                time.sleep(0.1)
            compacted.append(address)
        finally:
            client.close()
    return compacted


@contextmanager
def bench_django() -> Iterator[dict[str, str]]:
    """Django set up in this process on the bench's database and Redis (migrated), for the
    in-process measurements; the embedded servers this started are stopped at the end."""
    env, started = bench_environment()
    os.environ.update(env)
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        import django

        django.setup()
        yield env
    finally:
        embedded.stop_services(started)


def _recreate_database(url: str) -> None:
    import psycopg

    admin = _with_path(url, "/postgres").replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')


class Child:
    """One server process in its own process group, its output in a log file; ``base``:
    its URL, for an HTTP server."""

    base = ""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            argv, cwd=BASE_DIR, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    def pids(self) -> list[int]:
        """The process and its children (gunicorn's or Celery's workers)."""
        return [self.proc.pid, *children_of(self.proc.pid)]

    def stop(self, timeout: float = 20.0) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


class FrontChild(Child):
    """nginx with the repository's configuration in front of one upstream, in the
    foreground in its own process group; ``base``: its URL. Stopping it removes its prefix
    (configuration, cache, temporary files) and its access log."""

    def __init__(self, name: str, front: nginx_conf.Front, env: dict[str, str], log_dir: Path):
        super().__init__(name, front.argv(), env, log_dir)
        self.front, self.base = front, front.base_url

    def stop(self, timeout: float = 20.0) -> None:
        super().stop(timeout)
        shutil.rmtree(self.front.prefix, ignore_errors=True)
        self.front.access_log.unlink(missing_ok=True)


def front_start(upstream: str, log_dir: Path, name: str = "nginx") -> FrontChild:
    """deploy/nginx/shop.conf rendered by devtools/nginx.py on a free loopback port in front
    of ``upstream`` (``host:port``), as `make run` and the tests run it; returned once it
    answers through to the upstream. Its prefix lives under .local/ (run as root, nginx's
    workers are ``nobody``, who cannot enter a private temporary folder); it serves no
    static files or published pages here (empty roots: the bench asks for none)."""
    (BASE_DIR / ".local").mkdir(exist_ok=True)
    prefix = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=BASE_DIR / ".local"))
    prefix.chmod(0o755)
    for root in ("static", "publish"):
        (prefix / root).mkdir(mode=0o755)
    try:
        configured = nginx_conf.configure(
            prefix,
            port=free_port(),
            upstream=upstream,
            static_root=prefix / "static",
            publish_root=prefix / "publish",
            log_dir=log_dir / name,
        )
    except Exception:
        shutil.rmtree(prefix, ignore_errors=True)
        raise
    child = FrontChild(name, configured, dict(os.environ), log_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not child.alive():
            child.stop()
            raise RuntimeError(f"nginx died:\n{child.tail()}\n{configured.error_log_tail()}")
        if nginx_conf.answers(child.base):
            return child
        time.sleep(0.1)
    child.stop()
    raise RuntimeError(f"nginx did not answer through to {upstream} within 30 s:\n{configured.error_log_tail()}")


def nginx_facts(front: FrontChild) -> str:
    """Which nginx the run measured: its version and worker processes."""
    version = subprocess.run([nginx_conf.binary(), "-v"], capture_output=True, text=True).stderr.strip()
    workers = 0
    for pid in front.pids()[1:]:
        try:
            workers += Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"nginx: worker process")
        except OSError:
            continue
    return f"{version.removeprefix('nginx version: ')}, {workers} worker process{'es' if workers != 1 else ''}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, check=True)


# gunicorn's worker class and the application it serves: the production server (uvicorn
# workers, server/); for contrast, the threaded WSGI server.
SERVERS = {
    "uvicorn": ("server.worker.UvicornWorker", "config.asgi:application"),
    "gthread": ("gthread", "config.wsgi:application"),
}


def gunicorn_start(
    env: dict[str, str], log_dir: Path, port: int, name: str = "gunicorn", server: str = "uvicorn", **overrides: str
) -> Child:
    worker_class, application = SERVERS[server]
    child_env = dict(env, GUNICORN_BIND=f"127.0.0.1:{port}", GUNICORN_ACCESS_LOG="", GUNICORN_WORKER_CLASS=worker_class)
    child_env.update(overrides)
    argv = [str(BIN / "gunicorn"), "-c", str(BASE_DIR / "gunicorn.conf.py"), application]
    child = Child(name, argv, child_env, log_dir)
    child.base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"gunicorn died:\n{child.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/ping", timeout=2) as reply:
                if reply.status == 200:
                    return child
        except OSError:
            time.sleep(0.2)
    child.stop()
    raise RuntimeError(f"gunicorn did not answer within 90 s:\n{child.tail()}")


def worker_start(env: dict[str, str], log_dir: Path, concurrency: int, nice: int = 0) -> Child:
    """A Celery worker; ``nice`` > 0 runs it below the web tier's CPU priority."""
    argv = [
        str(BIN / "celery"),
        "-A",
        "config",
        "worker",
        "--loglevel",
        "WARNING",
        "--concurrency",
        str(concurrency),
        "--hostname",
        f"bench-{os.getpid()}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    child = Child("celery", argv, env, log_dir)
    import redis

    broker = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    deadline = time.monotonic() + 90
    # Ready when it has registered with the broker: it then consumes the "celery" queue.
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"celery worker died:\n{child.tail()}")
        if broker.exists("_kombu.binding.celery"):
            time.sleep(1.0)
            return child
        time.sleep(0.2)
    child.stop()
    raise RuntimeError(f"celery worker not ready within 90 s:\n{child.tail()}")


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a gunicorn master's workers), from /proc."""
    found = []
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(path.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(path.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _roots(comm: str) -> list[int]:
    """The processes named ``comm`` whose parent is not: each server's own process."""
    roots = []
    for path in Path("/proc").glob("[0-9]*/comm"):
        try:
            if path.read_text().strip() != comm:
                continue
            pid = int(path.parent.name)
            parent = int((path.parent / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if _comm(parent) != comm:
            roots.append(pid)
    return roots


def postgres_roots() -> list[int]:
    """PostgreSQL's postmaster: the embedded one when it runs here, otherwise every
    PostgreSQL on this machine (a bench on a shared machine counts the others' work too)."""
    pg_pid = embedded.PG_DATA / "postmaster.pid"
    if pg_pid.exists():
        return [int(pg_pid.read_text().split("\n", 1)[0])]
    return _roots("postgres")


def redis_roots() -> list[int]:
    """The embedded Redis when it runs here, otherwise every redis-server on this machine."""
    redis_pid = embedded.REDIS_DIR / "redis.pid"
    if redis_pid.exists():
        return [int(redis_pid.read_text().strip())]
    return _roots("redis-server")


def postgres_pids() -> list[int]:
    """PostgreSQL's postmasters (see postgres_roots) and their backends."""
    return [pid for root in postgres_roots() for pid in (root, *children_of(root))]


def redis_pids() -> list[int]:
    return redis_roots()


def tree_cpu(roots: list[int]) -> dict[int, float]:
    """{server: CPU seconds so far of it and its children}: the server's own and that of its
    children that have exited (PostgreSQL's backends of short-lived connections, such as a
    Celery task's, are gone before they could be read), plus the living children's. Compare
    two readings per server: one that started or stopped in between is no part of a delta."""
    return {root: cpu_seconds([root], reaped=True) + cpu_seconds(children_of(root)) for root in roots}


def rss_mb(pid: int) -> float | None:
    """The resident memory of a process (VmRSS), in MB; None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pids: list[int], *, reaped: bool = False) -> float:
    """User + system CPU time of these processes so far; ``reaped``: plus that of their
    children that have exited (PostgreSQL's backends of short-lived connections, such as
    a Celery task's, are gone before they could be read)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        if reaped:
            total += int(fields[13]) + int(fields[14])
    return total / tick
