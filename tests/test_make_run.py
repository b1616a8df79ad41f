"""`make run` end to end: the supervisor (`python -m config.stack`) starts its own
embedded PostgreSQL and Redis (in a state folder of its own, so the servers this suite
runs on are not touched), gunicorn, a Celery worker and beat; a shopper buys through
HTTP and gets an order; SIGINT stops every process it started, and nothing else."""

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

from seckill.redis_client import stock_redis

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
    subprocess.run([sys.executable, "-m", "config.embedded", "down"], cwd=BASE_DIR, env=env, check=False)
    shutil.rmtree(path, ignore_errors=True)


def test_make_run_serves_sells_and_stops_cleanly(stack_state_dir, tmp_path):
    port, pg_port, redis_port = free_port(), free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
        and not k.startswith("SECKILL_")
    }
    env.update(
        PORT=str(port),
        WEB_CONCURRENCY="1",
        SECKILL_STATE_DIR=str(stack_state_dir),
        SECKILL_EMBEDDED_PG_PORT=str(pg_port),
        SECKILL_EMBEDDED_REDIS_PORT=str(redis_port),
        PYTHONUNBUFFERED="1",
    )
    log_path = tmp_path / "stack.log"
    log = open(log_path, "wb")
    stack = subprocess.Popen(
        [sys.executable, "-m", "config.stack"],
        cwd=BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    children: set[int] = set()
    try:
        wait_until(
            lambda: stack.poll() is not None or answers(f"{base}/api/activities/"),
            timeout=240,
            interval=0.5,
            what="make run to serve",
        )
        assert stack.poll() is None, log_path.read_text()[-4000:]

        # seed_demo made shoppers with API tokens and a running sale.
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{pg_port}/seckill") as db:
            (key,) = db.execute(
                "SELECT t.key FROM authtoken_token t JOIN auth_user u ON u.id = t.user_id WHERE u.username = 'alice'"
            ).fetchone()
        status, activities = http("GET", f"{base}/api/activities/")
        live = next(a for a in activities if a["status"] == "live")
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

        children = descendants(stack.pid)
        names = {Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in children}
        assert any("gunicorn" in n for n in names) and any(" worker" in n for n in names)
        assert any(" beat" in n for n in names), names
    finally:
        if stack.poll() is None:
            stack.send_signal(signal.SIGINT)
        try:
            stack.wait(90)
        finally:
            if stack.poll() is None:
                os.killpg(stack.pid, signal.SIGKILL)
            log.close()

    output = log_path.read_text()
    assert stack.returncode == 0, output[-4000:]
    # The stack names the servers it stopped; whether it found Redis still up or not, the
    # port checks below are what prove nothing it started is left running.
    assert "stopped (and the embedded postgres" in output, output[-2000:]
    assert "did not stop in time" not in output, output[-2000:]  # each child stopped on SIGTERM
    leftovers = [pid for pid in children if running(pid)]
    assert not leftovers, f"still running after SIGINT: {leftovers}"
    # The servers the stack started are down; the suite's own servers are not.
    assert not (stack_state_dir / "pgdata" / "postmaster.pid").exists()
    wait_until(lambda: not answers_tcp(redis_port) and not answers_tcp(pg_port), timeout=30, what="servers to stop")
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert stock_redis().ping()


def answers_tcp(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
