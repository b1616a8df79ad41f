"""`make run` end to end: the supervisor (`python -m devtools.stack`) starts its own
embedded PostgreSQL and Redis (in a state folder of its own, so the servers this suite
runs on are not touched), gunicorn, a Celery worker and beat; a shopper buys through
HTTP and gets an order; SIGINT (Ctrl-C), SIGTERM or SIGHUP stops every process it started,
and nothing else, also when its output went away first; a port in use stops it before
anything starts."""

import importlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from io import StringIO
from pathlib import Path

import psycopg
import pytest
from celery.app.trace import LOG_FAILURE, LOG_RECEIVED, LOG_SUCCESS
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from devtools.stack import banner, listener_pids, listens
from seckill.management.commands.seed_demo import SOON
from seckill.models import Activity
from stock.redis_client import stock_redis

from .helpers import BASE_DIR, free_port, wait_until


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
    folder and embedded servers, or the servers ``services`` names (DATABASE_URL, REDIS_URL
    and the like, as a reader's environment may set them); its output kept for failures."""

    def __init__(
        self,
        state_dir: Path,
        log_path: Path,
        *,
        port: int | None = None,
        piped: bool = False,
        services: dict[str, str] | None = None,
    ):
        self.port, self.pg_port, self.redis_port = port or free_port(), free_port(), free_port()
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
            **(services or {}),
        )
        self.env = env  # what a reader's shell beside this make run holds
        self.state_dir, self.log_path = state_dir, log_path
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "wb")
        # piped: `make run 2>log | grep …` — stdout a pipe the test reads, then closes.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.stack"],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE if piped else self._log,
            stderr=self._log if piped else subprocess.STDOUT,
            start_new_session=True,
        )
        self.piped_lines: list[str] = []
        self.pipe_closed = threading.Event()

    def read_pipe_until(self, text: str) -> None:
        """Read the piped stdout until a line holds ``text``, then close the pipe (the
        grep at the end of `make run | grep` ended), all in a thread of its own."""

        def read():
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                self.piped_lines.append(raw.decode(errors="replace"))
                if text in self.piped_lines[-1]:
                    break
            self.proc.stdout.close()
            self.pipe_closed.set()

        threading.Thread(target=read, daemon=True).start()
        wait_until(self.pipe_closed.is_set, timeout=600, interval=0.5, what=f"{text!r} on the piped stdout")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self) -> None:
        wait_until(
            lambda: self.proc.poll() is not None or answers(f"{self.base}/api/activities/"),
            timeout=600,  # a first run on a loaded machine: initdb, migrate, collectstatic, seed
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
        # Each child stopped on SIGTERM. The worker's task lines too: a warm shutdown waits
        # for the tasks it runs, and the tail alone does not say which one it waited for.
        tasks = "\n".join(line for line in output.splitlines() if "Task " in line or "worker:" in line)
        assert "did not stop in time" not in output, f"{tasks}\n…\n{output[-2000:]}"
        self.assert_nothing_left(children, signum)

    def assert_nothing_left(self, children: set[int], signum: int) -> None:
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


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.django_db
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
        # The first run's banner, once web, worker and beat are up, shows the new admin's
        # password: the account's.
        found = wait_until(
            lambda: re.search(r"superuser  admin / (\S+)", stack.output()), timeout=120, what="the ready banner"
        )
        password = found.group(1)
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{stack.pg_port}/seckill") as db:
            (stored,) = db.execute("SELECT password FROM auth_user WHERE username = 'admin'").fetchone()
        assert PBKDF2PasswordHasher().verify(password, stored)  # the local settings' hasher
    finally:
        stack.stop(signal.SIGINT)
    stack.assert_stopped_cleanly(children, signal.SIGINT)

    # Shown once, with how to reset it, and last: after the children's start-up lines.
    output = stack.output()
    assert output.count(password) == 1
    assert 'make manage ARGS="changepassword admin"' in output
    ready_at = output.index("ready: the shop at")
    assert output.index("celery@") < ready_at < found.start()
    # Beat's routine ticks are not logged one by one.
    assert "Sending due task" not in output


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.django_db
def test_make_run_stops_every_process_on_sigterm(stack_state_dir, tmp_path):
    stack = Stack(stack_state_dir, tmp_path / "stack.log")
    children: set[int] = set()
    try:
        stack.wait_serving()
        children = stack.children()
    finally:
        stack.stop(signal.SIGTERM)
    stack.assert_stopped_cleanly(children, signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.django_db
def test_make_run_stops_every_process_on_sigint_after_its_output_pipe_closed(stack_state_dir, tmp_path):
    # `make run 2>err | grep -v celery`, then Ctrl-C: grep ends first, and each line the
    # stack then writes meets a closed pipe.
    stack = Stack(stack_state_dir, tmp_path / "stack.err", piped=True)
    children: set[int] = set()
    try:
        stack.read_pipe_until("press Ctrl-C to stop everything")
        children = stack.children()
    finally:
        stack.stop(signal.SIGINT)
    err = stack.output()
    stack.assert_nothing_left(children, signal.SIGINT)
    assert stack.proc.returncode == 0, err[-4000:]
    assert "BrokenPipeError" not in err, err[-4000:]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.django_db
def test_make_run_stops_every_process_on_sighup(stack_state_dir, tmp_path):
    # The terminal closed under it.
    stack = Stack(stack_state_dir, tmp_path / "stack.log")
    children: set[int] = set()
    try:
        stack.wait_serving()
        children = stack.children()
    finally:
        stack.stop(signal.SIGHUP)
    stack.assert_stopped_cleanly(children, signal.SIGHUP)


@pytest.mark.django_db
def test_make_run_on_a_taken_port_says_so_and_starts_nothing(stack_state_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        stack = Stack(stack_state_dir, tmp_path / "stack.log", port=taken.getsockname()[1])
        try:
            stack.proc.wait(60)
        finally:
            stack.stop(signal.SIGTERM)
        output = stack.output()
        assert stack.proc.returncode != 0, output
        # Which port, who holds it, and what to do.
        assert f"cannot start: 127.0.0.1:{stack.port} is taken" in output, output
        assert f"pid {os.getpid()}" in output and "PORT=<port> make run" in output, output
        assert "migrating" not in output and "started" not in output, output
    assert not descendants(stack.proc.pid)
    assert not (stack_state_dir / "pgdata").exists() and not (stack_state_dir / "redis").exists()
    assert not answers_tcp(stack.redis_port) and not answers_tcp(stack.pg_port)


def test_ready_is_said_for_its_own_listener_only():
    # "ready" asks whether its own nginx and gunicorn hold the ports: another process's
    # server answering there is not its own.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert listens(os.getpid(), port)
            assert not listens(other.pid, port)
            assert listener_pids(port) == [os.getpid()]
        finally:
            other.kill()
            other.wait()
    assert not listens(os.getpid(), port) and listener_pids(port) == []


def answers_tcp(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# --- the first run's pieces: the banner, quiet ticks, the demo data ------------------------

SUMMARY = {
    "shoppers": ["alice", "bob"],
    "staff": {"merchant": "merchants", "reviewer": "reviewers"},
    "password": "shop-demo-2026",
    "sales": [
        {"id": 1, "title": "Demo mug for a dime", "phase": "live", "starts_in": 0, "start_local": "2026-12-01 10:00"},
        {"id": 2, "title": "Demo phone for a yuan", "phase": "upcoming", "starts_in": 300, "start_local": "X"},
    ],
}


def test_the_banner_shows_the_admin_password_only_when_this_run_created_it():
    created = "\n".join(
        banner(base="http://b", summary={**SUMMARY, "admin_password": "pw-XYZ"}, seeded_at=time.monotonic())
    )
    assert created.count("pw-XYZ") == 1 and "admin / pw-XYZ" in created
    again = "\n".join(banner(base="http://b", summary={**SUMMARY, "admin_password": None}, seeded_at=time.monotonic()))
    assert "pw-XYZ" not in again and "shown on the first run" in again
    for text in (created, again):
        assert 'make manage ARGS="changepassword admin"' in text
        assert "merchant (merchants)" in text and "reviewer (reviewers)" in text and "shop-demo-2026" in text
        assert "http://b/seckill/1/  Demo mug for a dime: on sale now" in text
        assert "http://b/seckill/2/  Demo phone for a yuan: opens X (in 5 min)" in text


def test_routine_ticks_are_not_logged_but_failures_and_other_tasks_are(caplog):
    beat, trace = logging.getLogger("celery.beat"), logging.getLogger("celery.app.trace")
    strategy = logging.getLogger("celery.worker.strategy")

    def task(name: str) -> dict:
        return {"id": "x1", "name": name, "return_value": None, "runtime": 0.01, "args": "()", "kwargs": "{}"}

    with caplog.at_level(logging.INFO):
        # Every beat entry here runs every few seconds.
        beat.info("Scheduler: Sending due task %s (%s)", "seckill-start", "seckill.tasks.activities_start_task")
        strategy.info(LOG_RECEIVED, task("seckill.tasks.room_ticks_task"))
        trace.info(LOG_SUCCESS, task("seckill.tasks.reconcile_live_task"))
        # What happens is kept: other tasks, failures, beat's own errors.
        beat.info("Scheduler: Sending due task %s (%s)", "nightly", "orders.tasks.report_task")
        strategy.info(LOG_RECEIVED, task("seckill.tasks.reservations_drain_task"))
        trace.info(LOG_SUCCESS, task("seckill.tasks.activity_start_task"))
        trace.error(LOG_FAILURE, {**task("seckill.tasks.room_ticks_task"), "description": "raised", "exc": "boom"})
        beat.error("beat: Connection error: refused")
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("celery")]
    assert logged == [
        "Scheduler: Sending due task nightly (orders.tasks.report_task)",
        "Task seckill.tasks.reservations_drain_task[x1] received",
        "Task seckill.tasks.activity_start_task[x1] succeeded in 0.01s: None",
        "Task seckill.tasks.room_ticks_task[x1] raised: boom",
        "beat: Connection error: refused",
    ]


def seed_demo() -> dict:
    out = StringIO()
    call_command("seed_demo", "--json", stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


# A title that says when or how long stops being true as the sale moves on.
STATES_A_TIME = re.compile(r"\d|minute|hour|second|\bnow\b|soon|today|tomorrow|running|start|open|live|ended", re.I)


@pytest.mark.django_db(transaction=True)
def test_seed_demo_keeps_one_set_of_sales_whose_titles_stay_true():
    from tests.helpers import staff_groups_create

    staff_groups_create()
    before = timezone.now()
    first = seed_demo()
    assert first["admin_password"]
    assert sorted(sale["phase"] for sale in first["sales"]) == ["live", "upcoming"]
    soon_id = next(sale["id"] for sale in first["sales"] if sale["phase"] == "upcoming")
    live_id = next(sale["id"] for sale in first["sales"] if sale["phase"] == "live")
    # A newcomer has five minutes to look around and sign up before it opens.
    assert Activity.objects.get(pk=soon_id).start_at >= before + SOON
    User = get_user_model()
    merchant, reviewer = User.objects.get(username="merchant"), User.objects.get(username="reviewer")
    assert merchant.is_staff and merchant.groups.filter(name="merchants").exists()
    assert reviewer.is_staff and reviewer.groups.filter(name="reviewers").exists()
    assert merchant.check_password(first["password"]) and not merchant.is_superuser

    # Later: the second sale has opened, and an older run's title states a time.
    Activity.objects.filter(pk=soon_id).update(start_at=timezone.now() - timedelta(seconds=1))
    Activity.objects.filter(pk=live_id).update(title="Mug for a dime (running)")
    second = seed_demo()
    assert second["admin_password"] is None
    assert sorted(sale["id"] for sale in second["sales"]) == sorted([soon_id, live_id])
    assert Activity.objects.count() == 2
    assert User.objects.filter(username__in=["admin", "merchant", "reviewer"]).count() == 3
    for activity in Activity.objects.all():
        assert activity.phase == "live"
        assert not STATES_A_TIME.search(activity.title), activity.title


# --- make's install step: progress, not a silent minute ------------------------------------

FAKE_PIP = """#!/bin/sh
echo "Looking in indexes: https://pypi.org/simple"
echo "Collecting Django==5.2.19 (from -r requirements.txt (line 2))"
echo "  Downloading django-5.2.19-py3-none-any.whl.metadata (4.1 kB)"
echo "Processing /wheels/celery-5.7.0-py3-none-any.whl (from -r requirements.txt (line 3))"
echo "Building wheels for collected packages: odd"
echo "  Building wheel for odd (pyproject.toml): started"
echo "Installing collected packages: Django, celery, odd"
[ "$FAIL" = 1 ] && { echo "ERROR: Could not install packages due to an OSError: disk full" >&2; exit 1; }
echo "Successfully installed Django-5.2.19 celery-5.7.0 odd-1.0"
"""


def run_install(tmp_path: Path, *, fail: bool) -> subprocess.CompletedProcess:
    """make's install step in a scratch copy, with a pip that prints what pip prints."""
    shutil.copy(BASE_DIR / "Makefile", tmp_path / "Makefile")
    for name in ("requirements.txt", "requirements-dev.txt"):
        (tmp_path / name).write_text("")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "pip").write_text(FAKE_PIP)
    (bin_dir / "pip").chmod(0o755)
    # Not a sub-make of `make test`: MAKELEVEL and MAKEFLAGS would add "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    env["FAIL"] = "1" if fail else "0"
    return subprocess.run(["make", "install"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)


def test_make_shows_one_line_per_package_and_keeps_pips_status(tmp_path):
    (tmp_path / "ok").mkdir()
    done = run_install(tmp_path / "ok", fail=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "installing dependencies into .venv (pip's full output: .venv/pip.log)…",
        "  collecting Django==5.2.19",
        "  collecting celery-5.7.0-py3-none-any.whl",
        "  building odd",
        "  installing the collected packages…",
        "  installed",
    ]
    assert (tmp_path / "ok" / ".venv" / ".installed").exists()
    assert "Downloading" in (tmp_path / "ok" / ".venv" / "pip.log").read_text()

    (tmp_path / "bad").mkdir()
    failed = run_install(tmp_path / "bad", fail=True)
    assert failed.returncode != 0
    assert "ERROR: Could not install packages due to an OSError: disk full" in failed.stdout
    assert not (tmp_path / "bad" / ".venv" / ".installed").exists()


def test_the_local_settings_log_logins_only_when_they_go_wrong():
    local = importlib.import_module("config.settings.local")
    assert local.LOGGING["loggers"]["axes"] == {"level": "WARNING"}
    assert local.LOGGING["loggers"]["django.request"] == settings.LOGGING["loggers"]["django.request"]
