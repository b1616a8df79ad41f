"""`make run`: the whole system on one machine.

Starts the embedded PostgreSQL and Redis when DATABASE_URL / REDIS_URL are unset,
migrates, collects the static files, seeds the demo data, then runs nginx on PORT (the
repository's deploy/nginx/shop.conf, devtools/nginx.py) in front of gunicorn on a free
loopback port, a Celery worker and Celery beat, and prints where to go (and the admin
password, when this run created the account) once its own nginx and gunicorn answer and
the worker and beat are up.

It stops every process it started, embedded servers included, however it is asked to or
left: Ctrl-C (SIGINT), SIGTERM, SIGHUP (the terminal closed), a child that exits, or an
error. Its output may go away under it (``make run | grep …`` and the grep ended): what it
would print is dropped and it carries on. Should it die without a chance to clean up
(SIGKILL), the kernel sends each child SIGTERM (PR_SET_PDEATHSIG, Linux).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools import embedded, nginx

BASE_DIR = Path(__file__).resolve().parent.parent
PY = sys.executable
BIN = Path(PY).parent
# The signals that ask it to stop; SIGHUP is a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
CELERY_ROOT_WARNING = "You're running the worker with superuser privileges"  # celery.platforms


def _say(message: str) -> None:
    """A line on stdout; once stdout is gone (a closed pipe, a dead terminal) nothing more
    is written there, and the run goes on (its output is not what it serves)."""
    try:
        print(f"[make run] {message}", flush=True)
    except (BrokenPipeError, OSError):
        # The buffered text would fail again at every flush, and at exit: point stdout at
        # /dev/null instead (the Python documentation's advice for SIGPIPE).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the supervisor's own clean-up only
        return None


# Looked up here, not in the child: between fork and exec a child should do little.
PRCTL = _prctl()


def _die_with_parent() -> None:
    """In a child between fork and exec: SIGTERM when the supervisor dies (Linux), so
    that a killed supervisor leaves no server behind."""
    if PRCTL is None:
        return
    PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the supervisor died before the guard was set
        os.kill(os.getpid(), signal.SIGTERM)


class Relay:
    """A pipe the children write to instead of this process's stdout or stderr, copied
    there by a thread: once that stream is gone (a closed pipe, a dead terminal) the copy
    stops and the output is read and dropped, so a child never meets a closed pipe (and
    never exits on one)."""

    def __init__(self, target_fd: int):
        self.target_fd = target_fd
        self.read_fd, self.fd = os.pipe()
        self.thread = threading.Thread(target=self._copy, name=f"relay-{target_fd}", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        writable = True
        while chunk := os.read(self.read_fd, 65536):
            while writable and chunk:
                try:
                    chunk = chunk[os.write(self.target_fd, chunk) :]
                except OSError:
                    writable = False
        os.close(self.read_fd)

    def close(self) -> None:
        """Once every child is gone: the rest copied, then the thread ends."""
        os.close(self.fd)
        self.thread.join(timeout=5)


def _manage(*args: str, env: dict, out: Relay, err: Relay) -> None:
    subprocess.run([PY, "manage.py", *args], cwd=BASE_DIR, env=env, check=True, stdout=out.fd, stderr=err.fd)


def seed(env: dict, err: Relay) -> dict:
    """seed_demo's summary (accounts, the admin password if created now, the sales)."""
    done = subprocess.run(
        [PY, "manage.py", "seed_demo", "--json"],
        cwd=BASE_DIR,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        stderr=err.fd,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _port_free(port: int) -> bool:
    """Nobody listens on 127.0.0.1:``port`` (SO_REUSEADDR, as nginx binds: connections
    of a run that just stopped, in TIME_WAIT, do not make it taken)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP ``port`` (any address), from /proc/net."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    with contextlib.suppress(OSError):  # gone, or not ours to read
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                found.add(target[8:-1])
    return found


def listener_pids(port: int) -> list[int]:
    """The processes that hold a listening socket on ``port`` (those this user may see)."""
    wanted = _listening_inodes(port)
    if not wanted:
        return []
    pids = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return sorted(pid for pid in pids if _socket_inodes(pid) & wanted)


def listens(pid: int, port: int) -> bool:
    """``pid`` itself holds the listening socket on ``port``: the answers there are its."""
    return bool(_socket_inodes(pid) & _listening_inodes(port))


def _who(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def port_taken_message(port: int) -> str:
    holders = "; ".join(f"pid {pid}: {_who(pid)[:80]}" for pid in listener_pids(port))
    return (
        f"cannot start: 127.0.0.1:{port} is taken{f' ({holders})' if holders else ''}"
        f" — another make run? Stop it, or PORT=<port> make run serves elsewhere"
    )


def django_paths(env: dict) -> tuple[Path, Path]:
    """STATIC_ROOT and SECKILL_PUBLISH_DIR as the settings say: what nginx serves itself."""
    code = "from django.conf import settings as s; print(s.STATIC_ROOT); print(s.SECKILL_PUBLISH_DIR)"
    done = subprocess.run([PY, "-c", code], cwd=BASE_DIR, env=env, check=True, stdout=subprocess.PIPE, text=True)
    static_root, publish_root = done.stdout.strip().splitlines()[-2:]
    return Path(static_root), Path(publish_root)


def banner(*, base: str, summary: dict, seeded_at: float) -> list[str]:
    """The lines printed once everything is up: where to go, who to be, what is on sale."""
    password = summary["password"]
    staff = ", ".join(f"{name} ({group})" for name, group in summary["staff"].items())
    lines = [
        f"ready: the shop at {base}/",
        f"  shoppers   {', '.join(summary['shoppers'])} — password {password}",
        f"  admin      {base}/admin/ — staff {staff}, password {password}",
    ]
    if summary["admin_password"]:
        lines.append(f"  superuser  admin / {summary['admin_password']}  (created now and shown only this once)")
    else:
        lines.append("  superuser  admin, with the password shown on the first run")
    lines.append('             forgot it? make manage ARGS="changepassword admin"')
    elapsed = time.monotonic() - seeded_at
    for sale in summary["sales"]:
        left = sale["starts_in"] - elapsed
        when = f"opens {sale['start_local']} (in {max(1, round(left / 60))} min)" if left > 0 else "on sale now"
        lines.append(f"  sale       {base}/seckill/{sale['id']}/  {sale['title']}: {when}")
    lines.append(f'  API docs   {base}/api/docs/   (a tour: README.md, "The first five minutes")')
    return lines


@dataclass
class Run:
    """What one `make run` started and whether it was asked to stop."""

    env: dict
    port: int
    out: Relay  # the children's stdout and stderr
    err: Relay
    started_here: set[str] = field(default_factory=set)  # the embedded servers this run started
    children: dict[str, subprocess.Popen] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    stopping: bool = False
    shown: bool = False  # the ready banner

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ready_dir(self) -> Path:
        return Path(self.env["SECKILL_READY_DIR"])

    def stop(self, *_) -> None:
        self.stopping = True

    def serves(self) -> bool:
        """Its own nginx holds the port and its own gunicorn the upstream, and the app
        answers through them (not another process that took either port meanwhile)."""
        upstream_port = int(self.env["GUNICORN_BIND"].rsplit(":", 1)[1])
        return (
            listens(self.children["nginx"].pid, self.port)
            and listens(self.children["web"].pid, upstream_port)
            and nginx.answers(self.base)
        )


def wait_ready(run: Run, patience: float = 120.0) -> bool:
    """Until its own nginx and gunicorn answer and the worker and beat said they are up
    (config.celery_app writes their marks): True; False when a child exits or we are
    stopping. After ``patience`` seconds it says once what it still waits for."""
    said_after = time.monotonic() + patience
    app_answered = False  # asked until it first answers: each answer is a line in the access log
    while not run.stopping:
        if any(proc.poll() is not None for proc in run.children.values()):
            return False
        app_answered = app_answered or run.serves()
        waiting = [name for name in ("worker", "beat") if not (run.ready_dir / name).exists()]
        if not app_answered:
            waiting.insert(0, "the app through nginx")
        if not waiting:
            return True
        if time.monotonic() > said_after:
            _say(f"still waiting for {', '.join(waiting)}; the lines above may say why (Ctrl-C stops)")
            said_after = float("inf")
        time.sleep(0.2)
    return False


def processes(env: dict, front: nginx.Front) -> dict[str, list[str]]:
    # --quiet: no banner. Run as root (a container, a VM), Celery warns at every start that
    # a worker should not be; for a machine's own make run that is noise: Python's -W
    # filter (its message's start) silences that warning alone.
    celery = [PY, "-W", f"ignore:{CELERY_ROOT_WARNING}", "-m", "celery", "-A", "config", "--quiet"]
    return {
        # Settings from gunicorn.conf.py (bind: GUNICORN_BIND, behind nginx; workers:
        # WEB_CONCURRENCY); the access log on stdout.
        "web": [str(BIN / "gunicorn"), "config.asgi:application", "--access-logfile", "-"],
        "worker": [*celery, "worker", "--loglevel", "INFO", "--concurrency", "2"],
        "beat": [
            *celery,
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(embedded.STATE_DIR / "celerybeat-schedule"),
        ],
        # In the foreground, as a child like the others; its logs in .local/nginx/.
        "nginx": front.argv(),
    }


def prepare(run: Run) -> None:
    """The environment every child shares; the embedded servers, when no URL is set."""
    env = run.env
    # The app takes the client's address from the header nginx writes (deploy/nginx/shop.conf).
    env["SECKILL_TRUSTED_PROXY_HEADER"] = "X-Forwarded-For"
    env["SECKILL_TRUSTED_PROXY_COUNT"] = "1"
    already = embedded.running_services()
    try:
        env.update(embedded.ensure_services(env))
    finally:  # one that started before the other failed is stopped too
        run.started_here = embedded.running_services() - already
    embedded.STATE_DIR.mkdir(parents=True, exist_ok=True)
    # Prometheus multiprocess mode: gunicorn workers and Celery children each write
    # their metrics here and /metrics adds them up; our own directory is emptied at each start.
    if not env.get("PROMETHEUS_MULTIPROC_DIR"):
        env["PROMETHEUS_MULTIPROC_DIR"] = str(embedded.STATE_DIR / "prometheus")
        shutil.rmtree(env["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
    Path(env["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
    ready_dir = embedded.STATE_DIR / "ready"
    shutil.rmtree(ready_dir, ignore_errors=True)
    ready_dir.mkdir(parents=True)
    env["SECKILL_READY_DIR"] = str(ready_dir)


def set_up(run: Run) -> nginx.Front:
    """The database migrated and seeded, the static files collected, nginx configured."""
    env = run.env
    _say("migrating the database…")
    _manage("migrate", "--noinput", "-v", "0", env=env, out=run.out, err=run.err)
    # nginx serves /static/ from STATIC_ROOT.
    _manage("collectstatic", "--noinput", "-v", "0", env=env, out=run.out, err=run.err)
    static_root, publish_root = django_paths(env)
    # gunicorn behind nginx, on a loopback port of its own (chosen after the embedded
    # servers took theirs): a TCP port, as gunicorn is served and measured everywhere
    # else, and loopback, so nothing off this machine reaches it but through nginx.
    env["GUNICORN_BIND"] = f"127.0.0.1:{_free_port()}"
    front = nginx.configure(
        embedded.STATE_DIR / "nginx",
        port=run.port,
        upstream=env["GUNICORN_BIND"],
        static_root=static_root,
        publish_root=publish_root,
    )
    _say("seeding demo data…")
    run.summary = seed(env, run.err)
    return front


def serve(run: Run, front: nginx.Front) -> int:
    """Start the children, say "ready" once they serve, then watch them until a stop is
    asked or one exits (its exit code)."""
    seeded_at = time.monotonic()
    for name, argv in processes(run.env, front).items():
        if run.stopping:  # a stop asked during the set-up: start nothing more
            return 0
        # Own process groups: the terminal's Ctrl-C reaches this supervisor, which
        # then stops each child in order instead of all of them at once.
        run.children[name] = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=run.env,
            stdout=run.out.fd,
            stderr=run.err.fd,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        _say(f"started {name} (pid {run.children[name].pid})")
    if not run.stopping and wait_ready(run):
        # Last, so that no start-up output of the children buries it.
        for line in banner(base=run.base, summary=run.summary, seeded_at=seeded_at):
            _say(line)
        run.shown = True
        if not run.env.get("METRICS_TOKEN"):
            _say("  /metrics   answers 401 without METRICS_TOKEN: METRICS_TOKEN=<token> make run, then")
            _say(f"             curl -H 'Authorization: Bearer <token>' {run.base}/metrics")
        _say("press Ctrl-C to stop everything")
    while not run.stopping:
        for name, proc in run.children.items():
            if proc.poll() is not None:
                _say(f"{name} exited with code {proc.returncode}; stopping the rest")
                return proc.returncode or 1
        time.sleep(0.3)
    return 0


def shut_down(run: Run) -> None:
    """Every child stopped (SIGTERM, then SIGKILL for its whole group after 15 s), then the
    embedded servers this run started."""
    _say("stopping…")
    for proc in run.children.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for name, proc in run.children.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _say(f"{name} did not stop in time; killing it")
            # The whole group: gunicorn's workers and the worker's pool go with it.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run.out.close()
    run.err.close()
    stopped = embedded.stop_services(run.started_here)
    if run.summary.get("admin_password") and not run.shown:  # stopped before the banner: never lose it
        _say(f"the admin account was created: admin / {run.summary['admin_password']}")
    _say("stopped" + (f" (and the embedded {', '.join(stopped)})" if stopped else ""))


def _fd(stream, standard: int) -> int:
    """The stream's file descriptor, or the standard one when it has none (a test's
    captured stdout is a Python object)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return standard


def main() -> int:
    env = dict(os.environ)
    # The local settings unless the caller chose others (manage.py, the WSGI/ASGI
    # applications and Celery default to production).
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    run = Run(env=env, port=int(env.get("PORT", "8000")), out=Relay(_fd(sys.stdout, 1)), err=Relay(_fd(sys.stderr, 2)))
    for signum in STOP_SIGNALS:  # before anything starts: a stop at any point is orderly
        signal.signal(signum, run.stop)
    # Checked before anything starts: nginx is the front door, and the port is its.
    try:
        nginx.binary()
    except nginx.FrontDoorError as exc:
        _say(f"cannot start: {exc}")
        return 1
    if not _port_free(run.port):
        _say(port_taken_message(run.port))
        return 1
    code = 0
    try:
        prepare(run)
        front = None if run.stopping else set_up(run)
        if front is not None and not run.stopping:
            code = serve(run, front)
    except subprocess.CalledProcessError as exc:
        _say(f"setup step failed: {' '.join(map(str, exc.cmd))} (exit {exc.returncode})")
        code = exc.returncode or 1
    except (nginx.FrontDoorError, RuntimeError) as exc:  # RuntimeError: an embedded server did not start
        _say(f"cannot start: {exc}")
        code = 1
    finally:
        shut_down(run)
    return code


if __name__ == "__main__":
    sys.exit(main())
