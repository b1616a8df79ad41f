"""`make bench`: bring the system up with production settings — nginx in front of gunicorn —
run every scenario through nginx, check the invariants after each, and write
docs/BENCHMARKS.md with a plot.

    make bench                                   # the full run (~20 minutes)
    make bench BENCH_ARGS="--quick"              # a trial: 3 s runs at c=50, docs/ untouched
    make bench BENCH_ARGS="--only yardstick,purchase --no-report"

Everything runs on this machine, load generator included; the figures that matter
are ratios measured side by side in one run, to the yardstick (bench/yardstick.py: plain
Django on the best of the standard servers behind the same nginx configuration, measured
before and after the scenarios; the purchases' tail also in rounds beside the standard
server with the shortest tail). The direct table measures both sides without nginx.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import runpy
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import stack
from .wrkrun import ensure_wrk

BASE_DIR = Path(__file__).resolve().parent.parent
# deploy/nginx/shop.conf's limit_conn: requests in progress at once from one address. wrk
# sends from 127.0.0.1, so every run stays below it (the bench's largest is 200).
FRONT_CONNECTIONS_PER_ADDRESS = 256
SCENARIOS = (
    "yardstick",
    "ping",
    "early",
    "soldout",
    "gates",
    "duplicate",
    "purchase",
    "room",
    "sharded",
    "naive",
    "flood",
    "keepalive",
    "direct",
    "drain",
    "engine",
)
# What `make bench` runs unless --only says otherwise: sharded and naive are context that
# costs ~80 s more; `--only all` runs every scenario.
DEFAULT_SCENARIOS = tuple(s for s in SCENARIOS if s not in ("sharded", "naive"))


def say(message: str) -> None:
    sys.stderr.write(("\r" if sys.stderr.isatty() else "") + f"[bench] {message}\n")
    sys.stderr.flush()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10, help="length of each wrk run (default 10)")
    parser.add_argument(
        "--connections", default=None, help="comma-separated wrk connection counts (default 50,200; --quick: 50)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a trial: 3 s runs, c=50 only, no drain or engine, docs/ left alone"
    )
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT_SCENARIOS),
        help=f"scenarios to run, from {','.join(SCENARIOS)} (or all); default: all but sharded and naive",
    )
    parser.add_argument(
        "--shoppers",
        type=int,
        default=400_000,
        help="distinct shoppers with API tokens in the shared cache (every purchase run takes new ones)",
    )
    parser.add_argument(
        "--soldout-shoppers", type=int, default=2_000, help="shoppers who keep retrying after the sell-out"
    )
    parser.add_argument(
        "--cold-shoppers",
        type=int,
        default=300_000,
        help="more shoppers whose tokens are in PostgreSQL only (the shared cache filled, then"
        " their entries removed): the purchase run with tokens not cached; 0 skips it",
    )
    parser.add_argument(
        "--tail-rounds",
        type=int,
        default=3,
        help="with the yardstick in the run: the purchases measured in this many rounds at each connection"
        " count, each after a pass of the standard server with the shortest tail, and one pass after the"
        " last; their p99 target is judged on the rounds (1: one measurement, judged on the yardstick's"
        " passes before and after the scenarios)",
    )
    parser.add_argument(
        "--direct-connections",
        default=None,
        help="comma-separated connection counts of the direct table (default: the first of --connections)",
    )
    parser.add_argument("--drain-reservations", type=int, default=10_000)
    parser.add_argument(
        "--drain-single-deadline", type=float, default=60, help="seconds the one-task-per-order drain may take"
    )
    parser.add_argument("--flood-stock", type=int, default=1_000)
    parser.add_argument("--engine-processes", type=int, default=4)
    parser.add_argument("--engine-seconds", type=float, default=5)
    parser.add_argument(
        "--engine-pipeline", type=int, default=32, help="script calls per round trip in the pipelined engine run"
    )
    parser.add_argument("--celery-concurrency", type=int, default=2)
    parser.add_argument(
        "--worker-nice",
        type=int,
        default=0,
        help="CPU niceness of the Celery worker (default 0, as users run it); 10 lets the web tier"
        " answer first on one shared box while the orders trail",
    )
    parser.add_argument("--port", type=int, default=0, help="gunicorn port (default: a free one)")
    parser.add_argument(
        "--server",
        choices=sorted(stack.SERVERS),
        default="uvicorn",
        help="uvicorn (production, config.asgi) or gthread (the threaded WSGI server)",
    )
    parser.add_argument("--out", default=str(BASE_DIR / "docs" / "BENCHMARKS.md"))
    parser.add_argument("--json", default=str(BASE_DIR / "bench" / "results" / "latest.json"))
    parser.add_argument("--no-report", action="store_true", help="print the table only; leave docs/ alone")
    parser.add_argument("--label", default="", help="a note for this run (e.g. 'before: DRF defaults')")
    return parser.parse_args(argv)


def machine_facts() -> dict:
    cpu = "unknown"
    with contextlib.suppress(OSError):  # no /proc/cpuinfo: the model stays "unknown"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split(":", 1)[1].strip()
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "wrk": (wrk.stdout or wrk.stderr).splitlines()[0] if (wrk.stdout or wrk.stderr) else "?",
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }


def code_version() -> str:
    """The commit measured, and whether the working tree had changes beside it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BASE_DIR, capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=BASE_DIR, capture_output=True, text=True).stdout
    return head.stdout.strip() + (" with uncommitted changes" if dirty.strip() else "")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.quick:
        args.seconds, args.no_report, args.tail_rounds = min(args.seconds, 3), True, 1
        args.connections = args.connections or "50"
        if args.only == ",".join(DEFAULT_SCENARIOS):
            args.only = ",".join(s for s in DEFAULT_SCENARIOS if s not in ("drain", "engine"))
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    if only == ["all"]:
        only = list(SCENARIOS)
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        print(f"unknown scenario(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    connections = [int(c) for c in (args.connections or "50,200").split(",")]
    args.direct_connections = [int(c) for c in args.direct_connections.split(",")] if args.direct_connections else []
    if max(connections) >= FRONT_CONNECTIONS_PER_ADDRESS:
        print(
            f"at most {FRONT_CONNECTIONS_PER_ADDRESS - 1} connections: nginx's limit_conn"
            f" (deploy/nginx/shop.conf) answers 429 past {FRONT_CONNECTIONS_PER_ADDRESS} from one address",
            file=sys.stderr,
        )
        return 2
    ensure_wrk(say)

    run_started = time.monotonic()
    say("starting the embedded servers (if needed) and a fresh bench database…")
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    env, started_servers = stack.bench_environment()
    os.environ.update(env)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    children: list = []
    try:
        stack.manage(env, "migrate", "--noinput", "-v", "0")
        import django

        django.setup()
        from .scenarios import Bench

        port = args.port or stack.free_port()
        # Every shopper of the waiting room's joins comes from 127.0.0.1: no per-address cap.
        web = stack.gunicorn_start(env, log_dir, port, server=args.server, SECKILL_ROOM_JOINS_PER_IP="off")
        children.append(web)
        front = stack.front_start(f"127.0.0.1:{port}", log_dir)
        children.append(front)
        worker = stack.worker_start(env, log_dir, args.celery_concurrency, nice=args.worker_nice)
        children.append(worker)
        say(
            f"up: nginx on {front.base} in front of gunicorn on 127.0.0.1:{port} ({len(web.pids()) - 1} workers),"
            f" celery worker; logs in {log_dir}"
        )
        bench = Bench(args=args, front=front, web=web, worker=worker, work_dir=log_dir)
        results = bench.run(only=only, connections=connections)
        facts = machine_facts()
        facts["uptime_before"] = uptime_before
        facts["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        # What gunicorn ran with: gunicorn.conf.py read under this run's environment.
        saved = dict(os.environ)
        os.environ.update(env, GUNICORN_WORKER_CLASS=stack.SERVERS[args.server][0])
        try:
            conf = runpy.run_path(str(BASE_DIR / "gunicorn.conf.py"))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        facts["gunicorn"] = {k: conf[k] for k in ("workers", "worker_class", "threads", "keepalive", "preload_app")}
        facts["gunicorn_workers"] = len(web.pids()) - 1
        facts["code"] = code_version()
        facts["nginx"] = stack.nginx_facts(front)
        facts["celery_worker_nice"] = args.worker_nice
        facts["redis"] = stack.redis_facts(env["REDIS_URL"])
        facts["run_minutes"] = round((time.monotonic() - run_started) / 60, 1)
        payload = {
            "command": "make bench" + (f" BENCH_ARGS={shlex.quote(shlex.join(argv))}" if argv else ""),
            "label": args.label,
            "machine": facts,
            "results": results,
            "yardstick": bench.yardstick,
            "yardstick_direct": bench.yardstick_direct,
            "tail_passes": bench.tail_passes,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str))
        from .report import report_print, report_write

        report_print(payload)
        if not args.no_report:
            report_write(payload, Path(args.out))
            say(f"wrote {args.out}")
        return 0 if not bench.failures else 1
    finally:
        for child in reversed(children):
            child.stop()
        stopped = stack.embedded.stop_services(started_servers)
        if stopped:
            say(f"stopped the embedded {', '.join(stopped)} this run started")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
