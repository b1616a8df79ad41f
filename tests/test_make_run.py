"""`make run` end to end: the supervisor (`python -m devtools.stack`) starts its own
embedded PostgreSQL and Redis (in a state folder of its own, so the servers this suite
runs on are not touched), gunicorn, a Celery worker and beat; a shopper buys through
HTTP and gets an order; SIGINT (Ctrl-C) or SIGTERM stops every process it started, and
nothing else."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from stock.redis_client import stock_redis

from .helpers import BASE_DIR, free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's bookkeeping is left


def http(method: str, url: str, *, key: str | None = None, body: dict | None = None) -> tuple[int, dict | str]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Token {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def answers(url: str) -> bool:
    try:
        return http("GET", url)[0] == 200
    except OSError:
        return False


@pytest.fixture
def stack_state_dir():
    # Under the checkout, not /tmp: the embedded PostgreSQL runs as an unprivileged
    # user when the suite runs as root, and it must be able to reach its data folder.
    (BASE_DIR / ".local").mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="stack-test-", dir=BASE_DIR / ".local"))
    path.chmod(0o755)
    yield path
    # Whatever happened, stop what may still run from that folder, then remove it.
    env = {**os.environ, "SECKILL_STATE_DIR": str(path)}
    subprocess.run([sys.executable, "-m", "devtools.embedded", "down"], cwd=BASE_DIR, env=env, check=False)
    shutil.rmtree(path, ignore_errors=True)


class Stack:
    """`python -m devtools.stack` (what `make run` runs) on free ports, with its own state
    folder and embedded servers; its output kept for failures."""

    def __init__(self, state_dir: Path, log_path: Path):
        self.port, self.pg_port, self.redis_port = free_port(), free_port(), free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
            and not k.startswith("SECKILL_")
        }
        env.update(
            PORT=str(self.port),
            WEB_CONCURRENCY="1",
            SECKILL_STATE_DIR=str(state_dir),
            SECKILL_EMBEDDED_PG_PORT=str(self.pg_port),
            SECKILL_EMBEDDED_REDIS_PORT=str(self.redis_port),
            PYTHONUNBUFFERED="1",
        )
        self.state_dir, self.log_path = state_dir, log_path
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.stack"],
            cwd=BASE_DIR,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self) -> None:
        wait_until(
            lambda: self.proc.poll() is not None or answers(f"{self.base}/api/activities/"),
            timeout=240,
            interval=0.5,
            what="make run to serve",
        )
        assert self.proc.poll() is None, self.output()[-4000:]

    def children(self) -> set[int]:
        """Every process below the stack, once gunicorn, the worker and beat all run."""

        def all_started():
            found = descendants(self.proc.pid)
            names = {Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in found}
            started = any("gunicorn" in n for n in names) and any(" worker" in n for n in names)
            return found if started and any(" beat" in n for n in names) else None

        return wait_until(all_started, timeout=120, interval=0.5, what="gunicorn, the worker and beat")

    def stop(self, signum: int) -> None:
        """Send ``signum``; SIGKILL the group if it outlives 90 s (the test then fails)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(90)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self._log.close()

    def assert_stopped_cleanly(self, children: set[int], signum: int) -> None:
        output = self.output()
        assert self.proc.returncode == 0, output[-4000:]
        # The stack names the servers it stopped; whether it found Redis still up or not,
        # the port checks below are what prove nothing it started is left running.
        assert "stopped (and the embedded postgres" in output, output[-2000:]
        assert "did not stop in time" not in output, output[-2000:]  # each child stopped on SIGTERM
        leftovers = [pid for pid in children if running(pid)]
        assert not leftovers, f"still running after {signal.Signals(signum).name}: {leftovers}"
        # The servers the stack started are down; the suite's own servers are not.
        assert not (self.state_dir / "pgdata" / "postmaster.pid").exists()
        wait_until(
            lambda: not any(answers_tcp(p) for p in (self.port, self.redis_port, self.pg_port)),
            timeout=30,
            what="the web server and the embedded servers to stop",
        )
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        assert stock_redis().ping()


def test_make_run_serves_sells_and_stops_cleanly(stack_state_dir, tmp_path):
    stack = Stack(stack_state_dir, tmp_path / "stack.log")
    base = stack.base
    children: set[int] = set()
    try:
        stack.wait_serving()

        # seed_demo made shoppers with API tokens and a running sale.
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{stack.pg_port}/seckill") as db:
            (key,) = db.execute(
                "SELECT t.key FROM authtoken_token t JOIN auth_user u ON u.id = t.user_id WHERE u.username = 'alice'"
            ).fetchone()
        status, activities = http("GET", f"{base}/api/activities/")
        live = next(a for a in activities["results"] if a["status"] == "live")
        status, flag = http("GET", f"{base}/api/activities/{live['id']}/flag")
        assert status == 200 and flag["token"]
        status, body = http(
            "POST", f"{base}/api/activities/{live['id']}/purchase", key=key, body={"token": flag["token"]}
        )
        assert status == 202 and body["code"] == "queued", body

        def ordered():
            code, result = http("GET", f"{base}/api/activities/{live['id']}/result", key=key)
            return result if code == 200 and result["code"] == "ordered" else None

        result = wait_until(ordered, timeout=120, interval=0.5, what="the worker to create the order")
        assert result["order"]["quantity"] == 1 and result["order"]["status"] == "pending"
        status, orders = http("GET", f"{base}/api/orders/", key=key)
        assert orders["count"] == 1

        children = stack.children()
    finally:
        stack.stop(signal.SIGINT)
    stack.assert_stopped_cleanly(children, signal.SIGINT)


def test_make_run_stops_every_process_on_sigterm(stack_state_dir, tmp_path):
    stack = Stack(stack_state_dir, tmp_path / "stack.log")
    children: set[int] = set()
    try:
        stack.wait_serving()
        children = stack.children()
    finally:
        stack.stop(signal.SIGTERM)
    stack.assert_stopped_cleanly(children, signal.SIGTERM)


def answers_tcp(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
