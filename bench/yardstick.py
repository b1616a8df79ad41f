"""The yardstick: what a Django user would deploy instead of this project — a plain Django
project (bench/plain/: `startproject`'s settings and middleware, DEBUG off, one
``JsonResponse({"ok": True})`` view at the project's ``/api/ping``) on the three standard
servers, behind the same nginx configuration as the project (deploy/nginx/shop.conf), measured
with the same wrk settings as the project's scenarios.

    from bench.yardstick import yardstick_measure, yardstick_best
    measured = yardstick_measure(seconds=10, connections=[50, 200])   # {server: {c: figures}}
    best = yardstick_best(measured)                                    # {c: figures of the best}

    .venv/bin/python -m bench.yardstick --seconds 5 --connections 50,200   # the table alone
    .venv/bin/python -m bench.yardstick --direct                           # straight at gunicorn

Each server is gunicorn with bench/plain/gunicorn.conf.py (two workers, gunicorn's defaults
otherwise: the project's gunicorn.conf.py is not read), started alone with its own nginx in
front (``front=False``: none), measured, stopped. Keep-alive is what each side gives: wrk
keeps its connections to nginx; nginx keeps up to 64 idle connections to a keep-alive server
(gthread and uvicorn-worker keep them 2 s), and connects anew for every request to the sync
workers, which close every connection — the sync worker's own cost, paid behind a proxy.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from .stack import BASE_DIR, BIN, Child, cpu_seconds, front_start
from .stack import free_port as _free_port
from .wrkrun import WrkResult, wrk_run

CONFIG = BASE_DIR / "bench" / "plain" / "gunicorn.conf.py"
PATH = "/api/ping"
# The latency percentiles every row keeps (wrk's, bench/wrk/rotate.lua).
PERCENTILES = ("p50", "p75", "p90", "p95", "p99", "p99.9")
# name -> gunicorn flags and application; the names are the table's.
SERVERS: dict[str, list[str]] = {
    "gunicorn sync ×2": ["--worker-class", "sync", "bench.plain.wsgi:application"],
    "gunicorn gthread 2×16": ["--worker-class", "gthread", "--threads", "16", "bench.plain.wsgi:application"],
    "uvicorn-worker ×2, Django's ASGI handler": [
        "--worker-class",
        "uvicorn_worker.UvicornWorker",
        "bench.plain.asgi:application",
    ],
}


def _say(message: str) -> None:
    sys.stderr.write(("\r" if sys.stderr.isatty() else "") + f"[bench] {message}\n")
    sys.stderr.flush()


def plain_environment() -> dict[str, str]:
    """This process's environment without what would change the yardstick's server: no
    GUNICORN_* (GUNICORN_CMD_ARGS would add flags), no WEB_CONCURRENCY, its own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUNICORN") and k != "WEB_CONCURRENCY"}
    env["DJANGO_SETTINGS_MODULE"] = "bench.plain.settings"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def plain_start(server: str, log_dir: Path, port: int | None = None) -> tuple[Child, str]:
    """gunicorn serving bench/plain with ``server``'s worker class; (the child, its base URL)
    once it answers."""
    port = port or _free_port()
    argv = [str(BIN / "gunicorn"), "-c", str(CONFIG), "--bind", f"127.0.0.1:{port}", *SERVERS[server]]
    name = "plain-" + "".join(ch if ch.isalnum() else "-" for ch in server.split(",")[0]).strip("-")
    child = Child(name, argv, plain_environment(), log_dir)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(f"{server} died:\n{child.tail()}")
        try:
            with urllib.request.urlopen(base + PATH, timeout=2) as reply:
                if reply.status == 200 and len(child.pids()) >= 3:  # the master and both workers
                    return child, base
        except OSError:
            pass
        time.sleep(0.2)
    child.stop()
    raise RuntimeError(f"{server} did not answer within 60 s:\n{child.tail()}")


def figures(result: WrkResult, expected: set[str]) -> dict:
    """What a row says about one wrk run: throughput, latency, the transport errors by
    kind (wrk's connect / read / write / timeout counts) and the answers that were not
    one of the ``expected`` statuses."""
    return {
        "rps": round(result.rps, 1),
        "p50_ms": result.latency_us["p50"] / 1000,
        "p99_ms": result.latency_us["p99"] / 1000,
        # The tail's shape, not only its end (docs/BENCHMARKS.md, "Reading the figures").
        "percentiles_ms": {p: result.latency_us[p] / 1000 for p in PERCENTILES},
        "requests": result.requests,
        "statuses": result.statuses,
        "expected": sorted(expected),
        "unexpected": sum(n for code, n in result.statuses.items() if code not in expected),
        "errors_5xx": result.count("5"),
        "socket_errors": result.socket_errors,
        "connect_errors": result.errors["connect"],
        "read_errors": result.errors["read"],
        "write_errors": result.errors["write"],
        "timeouts": result.errors["timeout"],
        "wrk_cpu": round(result.wrk_cpu, 2),
        "server_cpu": round(result.server_cpu, 2),
        # CPU per answer is far steadier than RPS on a shared machine.
        "web_cpu_ms_per_req": round(1000 * result.server_cpu * result.extra["wall"] / max(1, result.requests), 3),
    }


def yardstick_measure(
    *,
    seconds: float,
    connections: list[int],
    servers: list[str] | None = None,
    log_dir: Path | None = None,
    say: Callable[[str], None] = _say,
    front: bool = True,
) -> dict[str, dict[int, dict]]:
    """Each server in turn: started with its own nginx in front (``front``; else none),
    warmed (2 s of wrk), measured at every connection count with the same wrk settings as
    the project's scenarios, stopped. A run that the keep-alive imbalance hit (one worker
    doing most of the work, ``WrkResult.lopsided``) is measured again once, as the project's
    bare view and rejections are. Every row has the CPU per answer of nginx and gunicorn
    (``cpu_split_ms``)."""
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="bench-yardstick-"))
    out: dict[str, dict[int, dict]] = {}
    via = "nginx" if front else "direct"
    for server in servers or list(SERVERS):
        child, base = plain_start(server, log_dir)
        proxy = None
        try:
            if front:
                proxy = front_start(base.removeprefix("http://"), log_dir, name=f"{child.name}-nginx")
                base = proxy.base
            pids = child.pids()
            wrk_run(base=base, method="GET", path=PATH, connections=20, seconds=2, label=f"warm-up {server}")
            out[server] = {}
            for c in connections:
                label = f"yardstick {server} c={c}" + ("" if front else " (direct)")
                result, cpu = _measured(base, c, seconds, label, {"nginx": proxy.pids() if proxy else [], "web": pids})
                note = ""
                if result.lopsided:
                    note = f"measured again: the first run was lopsided ({result.lopsided})"
                    result, cpu = _measured(
                        base, c, seconds, label, {"nginx": proxy.pids() if proxy else [], "web": pids}
                    )
                row = dict(figures(result, {"200"}), via=via, **cpu_per_answer(cpu, result.requests))
                if note:
                    row["note"] = note
                out[server][c] = row
                say(f"{label}: {row['rps']:,.0f} req/s, p99 {row['p99_ms']:.1f} ms")
        finally:
            if proxy is not None:
                proxy.stop()
            child.stop()
    return out


def _measured(
    base: str, c: int, seconds: float, label: str, parts: dict[str, list[int]]
) -> tuple[WrkResult, dict[str, float]]:
    """One wrk run at ``c`` connections, and the CPU seconds each part (nginx, gunicorn:
    their processes) spent over it."""
    before = {name: cpu_seconds(pids) for name, pids in parts.items()}
    result = wrk_run(
        base=base, method="GET", path=PATH, connections=c, seconds=seconds, label=label, server_pids=parts["web"]
    )
    return result, {name: cpu_seconds(pids) - before[name] for name, pids in parts.items()}


def cpu_per_answer(cpu_s: dict[str, float], requests: int) -> dict:
    """CPU seconds by process over a run -> ms per answer, by process and in all."""
    parts = {name: round(1000 * s / max(1, requests), 3) for name, s in cpu_s.items()}
    return {"cpu_split_ms": parts, "system_cpu_ms_per_req": round(sum(parts.values()), 3)}


def yardstick_best(measured: dict[str, dict[int, dict]]) -> dict[int, dict]:
    """Per connection count, the figures of the server with the most requests per second
    (with ``server``: its name)."""
    best: dict[int, dict] = {}
    for server, by_c in measured.items():
        for c, row in by_c.items():
            if c not in best or row["rps"] > best[c]["rps"]:
                best[c] = dict(row, server=server)
    return best


def yardstick_tail(measured: dict[str, dict[int, dict]]) -> dict[int, dict]:
    """Per connection count, the figures of the server with the shortest tail (lowest p99;
    with ``server``: its name)."""
    tail: dict[int, dict] = {}
    for server, by_c in measured.items():
        for c, row in by_c.items():
            if c not in tail or row["p99_ms"] < tail[c]["p99_ms"]:
                tail[c] = dict(row, server=server)
    return tail


def yardstick_reference(passes: list[dict[str, dict[int, dict]]]) -> dict[int, dict]:
    """The reference of a run measured in several passes (before and after the project's
    scenarios): per connection count, the mean of each pass's best req/s and the mean of each
    pass's best p99 (the lowest any standard server gave: the fastest server's own tail is
    not always the shortest, and a user choosing a server for its tail would have that one),
    with the pass figures kept (``passes``: [(server, rps, p99 server, p99), …])."""
    bests = [yardstick_best(p) for p in passes]
    tails = [yardstick_tail(p) for p in passes]
    ref: dict[int, dict] = {}
    for c in sorted({c for b in bests for c in b}):
        rows = [(b[c], t[c]) for b, t in zip(bests, tails, strict=True) if c in b]
        ref[c] = {
            "rps": sum(b["rps"] for b, _ in rows) / len(rows),
            "p99_ms": sum(t["p99_ms"] for _, t in rows) / len(rows),
            "passes": [(b["server"], b["rps"], t["server"], t["p99_ms"]) for b, t in rows],
        }
    return ref


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.yardstick", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", default="50,200")
    parser.add_argument("--direct", action="store_true", help="straight at gunicorn, no nginx in front")
    args = parser.parse_args(argv)
    measured = yardstick_measure(
        seconds=args.seconds, connections=[int(c) for c in args.connections.split(",")], front=not args.direct
    )
    best = yardstick_best(measured)
    print("| server | conns | req/s | p50 ms | p99 ms | CPU ms per answer | socket errors / timeouts | non-200 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for server, by_c in measured.items():
        for c, r in by_c.items():
            mark = " (best)" if best[c]["server"] == server else ""
            print(
                f"| {server}{mark} | {c} | {r['rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
                f" {r['system_cpu_ms_per_req']:.3f} | {r['socket_errors']} / {r['timeouts']} | {r['unexpected']} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
