"""Run wrk with bench/wrk/rotate.lua and read its result; also measure wrk's own CPU."""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .stack import cpu_seconds

SCRIPT = Path(__file__).parent / "wrk" / "rotate.lua"
THREADS = 2


@dataclass
class WrkResult:
    requests: int
    seconds: float
    statuses: dict[str, int]
    errors: dict[str, int]
    latency_us: dict[str, float]
    wrk_cpu: float  # wrk's CPU seconds / wall seconds (1.0 = one core busy)
    server_cpu: float = 0.0  # same for the server processes given
    extra: dict = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def socket_errors(self) -> int:
        return sum(v for k, v in self.errors.items() if k != "status")

    def count(self, *prefixes: str) -> int:
        return sum(n for code, n in self.statuses.items() if code.startswith(prefixes))

    @property
    def lopsided(self) -> str:
        """The keep-alive imbalance: wrk keeps its connections, a gunicorn worker keeps those
        it accepted, and now and then one gunicorn process holds most of them and the other
        idles. Non-empty (the two busiest processes' cores) when one did over twice the work."""
        wall = self.extra.get("wall") or 0
        busiest = sorted(self.extra.get("server_cpu_by_pid", []), reverse=True)[:2]
        if wall and len(busiest) == 2 and busiest[0] > 2 * busiest[1] and busiest[0] / wall > 0.5:
            return f"gunicorn processes at {busiest[0] / wall:.2f} and {busiest[1] / wall:.2f} cores"
        return ""


def ensure_wrk(say: Callable[[str], None] = print) -> None:
    """Install Debian's wrk when it is missing, so every bench entry point runs on a new machine."""
    if shutil.which("wrk"):
        return
    say("wrk is missing: installing Debian's wrk (apt-get install -y wrk)…")
    if subprocess.run(["apt-get", "install", "-y", "wrk"], capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True, capture_output=True)


def wrk_run(
    *,
    base: str,
    method: str,
    path: str,
    connections: int,
    seconds: float,
    tokens_file: Path | None = None,
    body: str = "",
    once: bool = False,
    label: str = "",
    server_pids: list[int] | None = None,
    timeout_s: int = 5,
) -> WrkResult:
    ensure_wrk()
    done_dir = tempfile.mkdtemp(prefix="wrk-done-")
    argv = [
        "wrk",
        "-t",
        str(THREADS),
        "-c",
        str(connections),
        "-d",
        f"{int(seconds)}s",
        "--timeout",
        f"{timeout_s}s",
        "-s",
        str(SCRIPT),
        base,
        "--",
        method,
        path,
        str(tokens_file) if tokens_file else "-",
        body,
        "1" if once else "0",
        str(THREADS),
        done_dir,
    ]
    # wrk is the only child reaped during the run, so the children's rusage delta is its CPU.
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    server_before = cpu_seconds(server_pids or [])
    by_pid_before = {pid: cpu_seconds([pid]) for pid in server_pids or []}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    tty = sys.stderr.isatty()

    def watch() -> None:
        # One line rewritten in place on a terminal; a line every 10 s in a log.
        ticks = 0
        while not stop.wait(1.0):
            ticks += 1
            elapsed = time.monotonic() - started
            if tty:
                sys.stderr.write(f"\r[bench] {label}: {elapsed:5.1f}/{seconds:.0f} s   ")
            elif ticks % 10 == 0:
                sys.stderr.write(f"[bench] {label}: {elapsed:5.1f}/{seconds:.0f} s\n")
            sys.stderr.flush()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    finished_at = None
    if once:
        # Every thread done: wake wrk's main thread (SIGINT ends the run and reports).
        while proc.poll() is None:
            if len(list(Path(done_dir).iterdir())) >= THREADS:
                finished_at = time.monotonic()
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.05)
    out, err = proc.communicate()
    wall = (finished_at or time.monotonic()) - started
    stop.set()
    server_cpu = cpu_seconds(server_pids or []) - server_before
    by_pid = [cpu_seconds([pid]) - before for pid, before in by_pid_before.items()]
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_seconds = (children_after.ru_utime - children_before.ru_utime) + (
        children_after.ru_stime - children_before.ru_stime
    )
    if tty:
        sys.stderr.write("\r" + " " * 79 + "\r")
    line = next((x for x in out.splitlines() if x.startswith("BENCH_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{out}\n{err}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    seconds_run = data["duration_us"] / 1e6
    return WrkResult(
        requests=data["requests"],
        seconds=seconds_run,
        statuses=data["statuses"],
        errors=data["errors"],
        latency_us=data["latency_us"],
        wrk_cpu=wrk_seconds / wall if wall else 0.0,
        server_cpu=server_cpu / wall if wall else 0.0,
        extra={"wall": wall, "finished_by_script": finished_at is not None, "server_cpu_by_pid": by_pid},
    )
