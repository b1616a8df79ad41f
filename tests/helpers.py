"""Shared test helpers: waiting with a deadline, real processes, requests through the
in-process WSGI and ASGI applications, Redis's command counts, sharded stock, the admin's
activity form."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def wait_until(
    predicate: Callable[[], object], *, timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> object:
    """Poll until predicate() is truthy; fail the test at the deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate} (last value {last!r})")


def gate_window_room(period_s: int, *, at_least_s: float = 60) -> None:
    """Wait (with a deadline) until the shopper gate's current fixed window of ``period_s``
    has ``at_least_s`` left on Redis's clock, the one the gate script reads: a test that
    counts up to a limit must not cross into the next window, where the count starts again."""
    from stock.redis_client import cache_redis

    def room_left() -> bool:
        seconds, micros = cache_redis().time()
        left_ms = period_s * 1000 - (seconds * 1000 + micros // 1000) % (period_s * 1000)
        return left_ms > at_least_s * 1000

    wait_until(room_left, timeout=at_least_s + 30, what=f"{at_least_s} s left in the gate's window")


def waiting_on_a_lock() -> int:
    """Backends of the test database blocked on a lock right now."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # the view is read once per transaction otherwise
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a process that must see what the test sees: the test
    database, the same Redis databases, the test settings."""
    from django.db import connection

    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    env["SECKILL_TEST_DATABASE_NAME"] = connection.settings_dict["NAME"]
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def http(
    base: str,
    method: str,
    path: str,
    *,
    key: str | None = None,
    body=None,
    headers: dict | None = None,
    timeout: float = 120,
):
    """One request to a real server: (status, JSON body, headers); never raises on an
    HTTP error status (every answer of the API is JSON, errors included), raises TimeoutError
    past ``timeout``. The headers are looked up case-insensitively, as HTTP's are (uvicorn
    sends them in lower case)."""
    data = json.dumps(body).encode() if body is not None else None
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    if key:
        all_headers["Authorization"] = f"Token {key}"
    request = urllib.request.Request(f"{base}{path}", data=data, headers=all_headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null"), response.headers
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, (json.loads(raw) if raw else None), exc.headers


def purchase(
    base: str, activity_id: int, key: str, token: str, *, headers: dict | None = None, timeout: float = 120, **extra
):
    """POST /api/activities/<id>/purchase as the shopper whose API token is ``key``;
    ``extra`` goes into the body (``quantity=2``). Answers as http()."""
    return http(
        base,
        "POST",
        f"/api/activities/{activity_id}/purchase",
        key=key,
        body={"token": token, **extra},
        headers=headers,
        timeout=timeout,
    )


class Process:
    """A real child process (gunicorn, a Celery worker) with its log kept for failures."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path):
        self.name, self.argv, self.env = name, argv, env
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Process:
        log = open(self.log_path, "ab")
        self._log = log
        self.proc = subprocess.Popen(
            self.argv, cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, not a shutdown."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    # SIGTERM to the process alone, its children left to it, as a supervisor stops a Celery
    # worker (systemd's KillMode=mixed): a warm shutdown finishes the tasks it is running.
    # SIGTERM to the whole group instead kills a pool child between a task's commit and its
    # Redis step: a crash, which reconciliation heals later, not a shutdown.
    stop_leader_only = False

    def stop(self, timeout: float = 15.0) -> None:
        if self.alive():
            if self.stop_leader_only:
                self.proc.send_signal(signal.SIGTERM)
            else:
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.stop_leader_only and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # what the leader left behind, if anything
        if getattr(self, "_log", None):
            self._log.close()


def start_celery_worker(
    log_dir: Path, *, name: str = "worker", concurrency: int = 2, env: dict | None = None, options: tuple = ()
) -> Process:
    """A real Celery worker process on the test broker and database; returns once it is
    ready. ``options``: more command-line options (``("--prefetch-multiplier", "1")``)."""
    hostname = f"{name}-{os.getpid()}-{time.monotonic_ns()}@%h"
    argv = [
        str(BIN / "celery"),
        "-A",
        "config",
        "worker",
        "--loglevel",
        "INFO",
        "--concurrency",
        str(concurrency),
        "--hostname",
        hostname,
        "--without-gossip",
        "--without-mingle",
        "--pool",
        "prefork",
        *options,
    ]
    process = Process(name, argv, env or subprocess_env(), log_dir)
    process.stop_leader_only = True
    process.start()
    wait_until(lambda: "ready." in process.log() or not process.alive(), timeout=60, what=f"{name} to be ready")
    assert process.alive(), f"{name} died:\n{process.log()[-3000:]}"
    return process


def start_gunicorn(
    log_dir: Path, *, workers: int = 2, threads: int = 1, env: dict | None = None
) -> tuple[Process, str]:
    """The real server (gunicorn.conf.py: uvicorn workers) on a free port; returns (process,
    base URL) once it answers."""
    import urllib.request

    port = free_port()
    argv = [
        str(BIN / "gunicorn"),
        "config.asgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--backlog",
        "2048",
        "--timeout",
        "60",
    ]
    # The uvicorn workers' thread pool (server.handlers.web_threads).
    env = dict(env or subprocess_env(), GUNICORN_THREADS=str(threads))
    process = Process("gunicorn", argv, env, log_dir).start()
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if not process.alive():
            return True
        try:
            with urllib.request.urlopen(f"{base}/api/activities/", timeout=2):
                return True
        except OSError:
            return False

    wait_until(answers, timeout=60, what="gunicorn to answer")
    assert process.alive(), f"gunicorn died:\n{process.log()[-3000:]}"
    return process, base


def shopping_while_rewarming(activity_id: int, shop: Callable, chunks: list, *, timeout: float = 180) -> list:
    """Run ``shop(chunk)`` for every chunk, each on a thread of its own, while another
    thread forces re-warms of the activity in a loop (one more once the shoppers are done).
    Returns the re-warms' outcomes in order: a WarmupResult, or the WarmupError "the stock
    kept changing" (a refusal, never a wrong write). Any other exception of any thread
    fails the test."""
    import threading

    from django.db import connection

    from seckill.sale.lifecycle import WarmupError, activity_warmup

    done, errors, outcomes = threading.Event(), [], []

    def guarded(work):
        try:
            work()
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    def rewarm_loop():
        while True:
            finished = done.is_set()  # one more round after the shoppers are done
            try:
                outcomes.append(activity_warmup(activity_id=activity_id, force=True))
            except WarmupError as exc:
                assert "kept changing" in str(exc), exc
                outcomes.append(exc)
            if finished:
                return

    rewarmer = threading.Thread(target=guarded, args=(rewarm_loop,))
    shoppers = [threading.Thread(target=guarded, args=(lambda c=chunk: shop(c),)) for chunk in chunks]
    rewarmer.start()
    for t in shoppers:
        t.start()
    for t in shoppers:
        t.join(timeout)
    done.set()
    rewarmer.join(timeout)
    assert not errors, errors
    assert not rewarmer.is_alive() and not any(t.is_alive() for t in shoppers), "threads still running"
    return outcomes


# --- the in-process WSGI and ASGI applications (server.handlers, server.app) ----------


def wsgi_call(app, method: str, path: str, *, headers: dict | None = None, body=None) -> dict:
    """One request through a WSGI app, in this process: status, headers (lower-case names,
    each a list of values), body."""
    import io

    raw = json.dumps(body).encode() if body is not None else b""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "testserver",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(raw),
        "wsgi.errors": sys.stderr,
        "CONTENT_LENGTH": str(len(raw)),
        "CONTENT_TYPE": "application/json" if body is not None else "",
        **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in (headers or {}).items()},
    }
    answer = {}

    def start_response(status, response_headers, exc_info=None):
        answer["status"] = int(status.split()[0])
        answer["headers"] = {}
        for name, value in response_headers:
            answer["headers"].setdefault(name.lower(), []).append(value)

    chunks = app(environ, start_response)
    answer["body"] = b"".join(chunks)
    getattr(chunks, "close", lambda: None)()
    return answer


def asgi_call(app, method: str, path: str, *, headers=None, body=None, chunks=None, disconnect=False) -> dict:
    """One request through an ASGI app, in this process: status, headers, body (as
    wsgi_call). ``chunks``: the body in these parts; ``disconnect``: the client goes away
    before sending its body (no answer: status None)."""
    import asyncio

    return asyncio.run(
        asgi_request(app, method, path, headers=headers, body=body, chunks=chunks, disconnect=disconnect)
    )


async def asgi_request(app, method: str, path: str, *, headers=None, body=None, chunks=None, disconnect=False) -> dict:
    """``asgi_call`` on the running event loop: many at once share it, as on the server."""
    import asyncio

    raw = json.dumps(body).encode() if body is not None else b""
    parts = chunks if chunks is not None else [raw]
    size = sum(len(p) for p in parts)
    scope_headers = [(b"host", b"testserver"), (b"content-length", str(size).encode())]
    if body is not None or chunks is not None:
        scope_headers.append((b"content-type", b"application/json"))
    scope_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": scope_headers,
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    messages = [{"type": "http.disconnect"}] if disconnect else []
    if not disconnect:
        messages = [
            {"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)
        ]
    sent = []

    async def run():
        never = asyncio.Event()

        async def receive():
            if messages:
                return messages.pop(0)
            await never.wait()  # the client stays connected until the answer is sent

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)

    await run()
    if not sent:
        return {"status": None, "headers": {}, "body": b""}
    start = sent[0]
    headers = {}
    for name, value in start["headers"]:
        headers.setdefault(name.decode().lower(), []).append(value.decode("latin1"))
    return {"status": start["status"], "headers": headers, "body": b"".join(m.get("body", b"") for m in sent[1:])}


# --- Redis's own count of the commands it ran -------------------------------------------


def redis_calls() -> dict[str, int]:
    """Commands the Redis server has run so far by name, all databases, INFO itself left out."""
    from stock.redis_client import stock_redis

    stats = stock_redis().info("commandstats")
    return {name: v["calls"] for name, v in stats.items() if name != "cmdstat_info"}


def calls_since(before: dict[str, int]) -> dict[str, int]:
    after = redis_calls()
    return {name: n - before.get(name, 0) for name, n in after.items() if n != before.get(name, 0)}


# --- sharded stock (Activity.shards = S > 1) --------------------------------------------

SHARDS = 8


def shard_stocks(activity) -> list[int | None]:
    """The stock left in each of the activity's shards in Redis (None: no key)."""
    from stock.keys import ActivityKeys
    from stock.redis_client import stock_redis

    client, keys = stock_redis(), ActivityKeys(activity.pk)
    return [None if (v := client.get(k.stock)) is None else int(v) for k in keys.shards(activity.shards)]


def reserve(activity, user_id: int, quantity: int = 1):
    """The purchase script for one shopper, with the activity's own limit and shards."""

    from stock.layout import StockLayout
    from stock.redis_client import stock_redis

    return StockLayout(activity.pk, activity.shards).reserve(
        stock_redis(), user_id=user_id, quantity=quantity, limit=activity.per_user_limit
    )


def claim_of(activity, user_id: int) -> bytes | None:
    """The shopper's claim in their user partition (None: not claimed)."""
    from stock.keys import USER_PARTITIONS, ActivityKeys
    from stock.redis_client import stock_redis

    part = ActivityKeys(activity.pk).user_partition(user_id, USER_PARTITIONS)
    return stock_redis().hget(part.users, user_id)


def assert_identity(activity) -> dict:
    from seckill.sale.reconciliation import reconcile

    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
    return report


# --- the merchant's admin -----------------------------------------------------------------


def form_data(**overrides) -> dict:
    """The admin's add/change form of an activity starting in an hour, with ``overrides``."""
    from datetime import timedelta

    from django.utils import timezone

    from .factories import ProductFactory

    start = timezone.now() + timedelta(hours=1)
    end = start + timedelta(hours=1)
    data = {
        "title": "Admin sale",
        "product": ProductFactory().pk,
        "seckill_price": "0.50",
        "start_at_0": start.strftime("%Y-%m-%d"),
        "start_at_1": start.strftime("%H:%M:%S"),
        "end_at_0": end.strftime("%Y-%m-%d"),
        "end_at_1": end.strftime("%H:%M:%S"),
        "total_stock": "25",
        "safety_stock": "5",
        "shards": "1",
        "per_user_limit": "2",
        "pay_timeout": "600",
        "stock-TOTAL_FORMS": "0",
        "stock-INITIAL_FORMS": "0",
        "stock-MIN_NUM_FORMS": "0",
        "stock-MAX_NUM_FORMS": "1",
    }
    data.update(overrides)
    return data


def staff_member(group: str | None):
    """(user, logged-in client) of a staff member of ``group``; None: a superuser. Each
    call makes a user of its own."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    User = get_user_model()
    name = f"{group or 'super'}-{User.objects.count()}"
    if group is None:
        user = User.objects.create_superuser(name, "s@example.com", "pw-for-tests")
    else:
        user = User.objects.create_user(name, password="pw-for-tests", is_staff=True)
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return user, client


def staff_groups_create() -> None:
    """The staff groups and their grants as the data migrations make them: a transactional
    test's flush empties every table, the migrations' rows included."""
    from importlib import import_module

    from django.apps import apps

    import_module("orders.migrations.0003_staff_groups").create_groups(apps, None)
    import_module("orders.migrations.0010_merchant_order_grants").grant(apps, None)
    import_module("seckill.migrations.0007_activity_owner").grant(apps, None)


# --- nginx in front (deploy/nginx/shop.conf, devtools/nginx.py) ---------------------------


class FrontProcess(Process):
    """nginx started by ``start_front``: ``front`` (devtools.nginx.Front: its prefix, logs
    and URL) and the roots it serves. Stopping it removes the prefix (configuration, cache,
    temporary files)."""

    def __init__(self, front, log_dir: Path, *, static_root: Path, publish_root: Path):
        super().__init__("nginx", front.argv(), dict(os.environ), log_dir)
        self.front, self.static_root, self.publish_root = front, static_root, publish_root

    def stop(self, timeout: float = 15.0) -> None:
        import shutil

        super().stop(timeout)
        shutil.rmtree(self.front.prefix, ignore_errors=True)


def start_front(
    log_dir: Path, upstream: str, *, static_root: Path | None = None, publish_root: Path | None = None
) -> tuple[FrontProcess, str]:
    """The repository's nginx configuration on a free port in front of ``upstream`` (a base
    URL such as start_gunicorn's, ``host:port`` or ``unix:/path``); returns (process, base
    URL) once nginx answers through to the upstream (``GET /api/ping`` is 200). Its logs go
    to ``log_dir``; its prefix lives under ``.local/`` (run as root, nginx's workers are
    ``nobody``, who cannot enter pytest's private temporary folders). ``static_root``
    defaults to STATIC_ROOT; ``publish_root`` to an empty folder of its own."""
    import tempfile

    from django.conf import settings

    from devtools import nginx

    (BASE_DIR / ".local").mkdir(exist_ok=True)
    prefix = Path(tempfile.mkdtemp(prefix="front-test-", dir=BASE_DIR / ".local"))
    prefix.chmod(0o755)
    publish_root = publish_root or prefix / "publish"
    publish_root.mkdir(parents=True, exist_ok=True)
    static_root = static_root or Path(settings.STATIC_ROOT)
    try:
        front = nginx.configure(
            prefix,
            port=free_port(),
            upstream=upstream.removeprefix("http://").rstrip("/"),
            static_root=static_root,
            publish_root=publish_root,
            log_dir=log_dir,
        )
    except Exception:
        import shutil

        shutil.rmtree(prefix, ignore_errors=True)
        raise
    process = FrontProcess(front, log_dir, static_root=static_root, publish_root=publish_root).start()
    wait_until(lambda: not process.alive() or nginx.answers(front.base_url), timeout=30, what="nginx to answer through")
    if not process.alive():
        process.stop()
        raise AssertionError(f"nginx died:\n{process.log()[-3000:]}\n{front.error_log_tail()}")
    return process, front.base_url
