"""The shop on this machine for a rehearsal, started as `make run` starts it (devtools.stack):
the embedded PostgreSQL and Redis unless DATABASE_URL / REDIS_URL name others, migrations,
the static files, nginx in front of gunicorn, a Celery worker and beat. The children's
output goes to log files, so that the rehearsal's progress line stays readable."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools import embedded, nginx
from devtools import stack as run_stack

BASE_DIR = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(extra: dict[str, str] | None = None) -> tuple[dict[str, str], set[str]]:
    """The stack's environment (the embedded servers started when needed) and which
    embedded servers this call started."""
    env = dict(os.environ, **(extra or {}))
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    already = embedded.running_services()
    env.update(embedded.ensure_services(env))
    return env, embedded.running_services() - already


def manage(env: dict[str, str], *args: str) -> str:
    """A management command's standard output (its errors shown as they come)."""
    done = subprocess.run(
        [PY, "manage.py", *args], cwd=BASE_DIR, env=env, check=True, stdout=subprocess.PIPE, text=True
    )
    return done.stdout


@dataclass
class Stack:
    base: str
    children: dict[str, subprocess.Popen] = field(default_factory=dict)
    started_services: set[str] = field(default_factory=set)

    def stop(self) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.children.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own group: gunicorn's workers, the pool
                proc.wait()
        embedded.stop_services(self.started_services)


def wait_ready(stack: Stack, ready_dir: Path, logs: Path, patience: float = 300.0) -> None:
    """Until nginx answers through to the app and the worker and beat left their marks
    (config.celery_app writes them)."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        exited = [name for name, proc in stack.children.items() if proc.poll() is not None]
        if exited:
            raise RuntimeError(f"{', '.join(exited)} exited; the logs are in {logs}")
        if all((ready_dir / name).exists() for name in ("worker", "beat")) and nginx.answers(stack.base):
            return
        time.sleep(0.3)
    raise RuntimeError(f"the shop did not come up within {patience:.0f} s; the logs are in {logs}")


def start(env: dict[str, str], *, logs: Path, started_services: set[str]) -> Stack:
    """Everything make run starts, behind nginx on a free port; returns once nginx answers
    through to the app and the worker and beat are up."""
    env = dict(env)
    env["SECKILL_TRUSTED_PROXY_HEADER"] = "X-Forwarded-For"  # nginx writes it (deploy/nginx/shop.conf)
    env["SECKILL_TRUSTED_PROXY_COUNT"] = "1"
    state = embedded.STATE_DIR / "rehearsal"
    ready_dir = state / "ready"
    shutil.rmtree(state, ignore_errors=True)
    ready_dir.mkdir(parents=True)
    env["SECKILL_READY_DIR"] = str(ready_dir)
    env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(state / "prometheus"))
    Path(env["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "collectstatic", "--noinput", "-v", "0")
    static_root, publish_root = run_stack.django_paths(env)
    env["GUNICORN_BIND"] = f"127.0.0.1:{free_port()}"
    port = int(env.get("REHEARSAL_PORT") or free_port())
    front = nginx.configure(
        state / "nginx", port=port, upstream=env["GUNICORN_BIND"], static_root=static_root, publish_root=publish_root
    )
    stack = Stack(base=front.base_url, started_services=started_services)
    logs.mkdir(parents=True, exist_ok=True)
    try:
        for name, argv in run_stack.processes(env, front).items():
            log = (logs / f"{name}.log").open("ab")
            stack.children[name] = subprocess.Popen(
                argv, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_ready(stack, ready_dir, logs)
    except BaseException:
        stack.stop()
        raise
    return stack
