"""Processes started inside the drill's namespaces, each in a process group of its own
(killed as a whole), with its output in a log file of the run's directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent


def wait_until(predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last value {last!r})")


def port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


class Proc:
    """One process (and its children) in a namespace."""

    registry: list[Proc] = []  # every one started, for the exit handlers

    def __init__(self, name: str, ns: str, argv: list[str], env: dict[str, str], log_dir: Path, *, user: str = ""):
        self.name, self.ns, self.argv, self.env, self.user = name, ns, argv, env, user
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen | None = None
        Proc.registry.append(self)

    def start(self) -> Proc:
        prefix = ["ip", "netns", "exec", self.ns]
        if self.user:  # postgres refuses root
            prefix += ["setpriv", "--reuid", self.user, "--regid", self.user, "--init-groups"]
        log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            [*prefix, *self.argv],
            cwd=BASE_DIR,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.alive():
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the group: a crash."""
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None or not self.alive():
            return
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    @classmethod
    def stop_all(cls) -> None:
        for proc in reversed(cls.registry):
            proc.stop(timeout=5)
        cls.registry.clear()
