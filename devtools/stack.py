"""`make run`: the whole system on one machine.

Starts the embedded PostgreSQL and Redis when DATABASE_URL / REDIS_URL are unset,
migrates, collects the static files, seeds the demo data, then runs nginx on PORT (the
repository's deploy/nginx/shop.conf, devtools/nginx.py) in front of gunicorn on a free
loopback port, a Celery worker and Celery beat, and prints where to go (and the admin
password, when this run created the account) once nginx answers through to the app and
the worker and beat are up.
Ctrl-C (SIGINT) or SIGTERM stops every process it started, embedded servers included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from devtools import embedded, nginx

BASE_DIR = Path(__file__).resolve().parent.parent
PY = sys.executable
BIN = Path(PY).parent


def _say(message: str) -> None:
    print(f"[make run] {message}", flush=True)


def _manage(*args: str, env: dict) -> None:
    subprocess.run([PY, "manage.py", *args], cwd=BASE_DIR, env=env, check=True)


def seed(env: dict) -> dict:
    """seed_demo's summary (accounts, the admin password if created now, the sales)."""
    done = subprocess.run(
        [PY, "manage.py", "seed_demo", "--json"], cwd=BASE_DIR, env=env, check=True, stdout=subprocess.PIPE, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def wait_ready(*, base: str, ready_dir: Path, children: dict, stopping, patience: float = 120.0) -> bool:
    """Until nginx answers through to the app and the worker and beat said they are up
    (config.celery_app writes their marks): True; False when a child exits or we are
    stopping. After ``patience`` seconds it says once what it still waits for."""
    said_after = time.monotonic() + patience
    app_answered = False  # asked until it first answers: each answer is a line in the access log
    while not stopping():
        if any(proc.poll() is not None for proc in children.values()):
            return False
        app_answered = app_answered or nginx.answers(base)
        waiting = [name for name in ("worker", "beat") if not (ready_dir / name).exists()]
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
    return {
        # Settings from gunicorn.conf.py (bind: GUNICORN_BIND, behind nginx; workers:
        # WEB_CONCURRENCY); the access log on stdout.
        "web": [str(BIN / "gunicorn"), "config.asgi:application", "--access-logfile", "-"],
        "worker": [str(BIN / "celery"), "-A", "config", "worker", "--loglevel", "INFO", "--concurrency", "2"],
        "beat": [
            str(BIN / "celery"),
            "-A",
            "config",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(embedded.STATE_DIR / "celerybeat-schedule"),
        ],
        # In the foreground, as a child like the others; its logs in .local/nginx/.
        "nginx": front.argv(),
    }


def main() -> int:
    env = dict(os.environ)
    # The local settings unless the caller chose others (manage.py, the WSGI/ASGI
    # applications and Celery default to production).
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    port = int(env.get("PORT", "8000"))
    # Checked before anything starts: nginx is the front door, and the port is its.
    try:
        nginx.binary()
    except nginx.FrontDoorError as exc:
        _say(f"cannot start: {exc}")
        return 1
    if not _port_free(port):
        _say(f"cannot start: 127.0.0.1:{port} is taken (another make run?); PORT=<port> make run serves elsewhere")
        return 1
    # The app takes the client's address from the header nginx writes (deploy/nginx/shop.conf).
    env["SECKILL_TRUSTED_PROXY_HEADER"] = "X-Forwarded-For"
    env["SECKILL_TRUSTED_PROXY_COUNT"] = "1"
    already = embedded.running_services()
    env.update(embedded.ensure_services(env))
    started_here = embedded.running_services() - already
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

    children: dict[str, subprocess.Popen] = {}
    stopping = False
    summary: dict = {}
    shown = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    try:
        _say("migrating the database…")
        _manage("migrate", "--noinput", "-v", "0", env=env)
        # nginx serves /static/ from STATIC_ROOT.
        _manage("collectstatic", "--noinput", "-v", "0", env=env)
        static_root, publish_root = django_paths(env)
        # gunicorn behind nginx, on a loopback port of its own (chosen after the embedded
        # servers took theirs): a TCP port, as gunicorn is served and measured everywhere
        # else, and loopback, so nothing off this machine reaches it but through nginx.
        env["GUNICORN_BIND"] = f"127.0.0.1:{_free_port()}"
        front = nginx.configure(
            embedded.STATE_DIR / "nginx",
            port=port,
            upstream=env["GUNICORN_BIND"],
            static_root=static_root,
            publish_root=publish_root,
        )
        _say("seeding demo data…")
        summary = seed(env)
        seeded_at = time.monotonic()
        for name, argv in processes(env, front).items():
            if stopping:  # Ctrl-C during the set-up: start nothing more
                break
            # Own process groups: the terminal's Ctrl-C reaches this supervisor, which
            # then stops each child in order instead of all of them at once.
            children[name] = subprocess.Popen(argv, cwd=BASE_DIR, env=env, start_new_session=True)
            _say(f"started {name} (pid {children[name].pid})")
        base = f"http://127.0.0.1:{port}"
        if not stopping and wait_ready(base=base, ready_dir=ready_dir, children=children, stopping=lambda: stopping):
            # Last, so that no start-up output of the children buries it.
            for line in banner(base=base, summary=summary, seeded_at=seeded_at):
                _say(line)
            shown = True
            if not env.get("METRICS_TOKEN"):
                _say("  /metrics   answers 401 without METRICS_TOKEN: METRICS_TOKEN=<token> make run, then")
                _say(f"             curl -H 'Authorization: Bearer <token>' http://127.0.0.1:{port}/metrics")
            _say("press Ctrl-C to stop everything")
        while not stopping:
            for name, proc in children.items():
                if proc.poll() is not None:
                    _say(f"{name} exited with code {proc.returncode}; stopping the rest")
                    code = proc.returncode or 1
                    stopping = True
                    break
            time.sleep(0.3)
    except subprocess.CalledProcessError as exc:
        _say(f"setup step failed: {' '.join(map(str, exc.cmd))} (exit {exc.returncode})")
        code = exc.returncode or 1
    except nginx.FrontDoorError as exc:
        _say(f"cannot start nginx: {exc}")
        code = 1
    finally:
        _say("stopping…")
        for proc in children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for name, proc in children.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _say(f"{name} did not stop in time; killing it")
                # The whole group: gunicorn's workers and the worker's pool go with it.
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        stopped = embedded.stop_services(started_here)
        if summary.get("admin_password") and not shown:  # stopped before the banner: never lose it
            _say(f"the admin account was created: admin / {summary['admin_password']}")
        _say("stopped" + (f" (and the embedded {', '.join(stopped)})" if stopped else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
