"""``python -m devtools.drill [--drills 1,2,…] [--latency-ms 0.25] [--short]`` (``make drill``):
builds the drill's hosts (devtools/drill/stack.py), runs each drill, prints the verdict
table and writes it with the figures to ``verdicts.json`` in the run's directory. Exit
status 0 when every verdict passes. docs/DRILLS.md says what each drill does."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from . import net
from .checker import Outcome, verdict_table
from .drills import DRILLS, Sale, Supervisor, run_drill
from .stack import Stack

FULL = Sale(shoppers=3000, units=300, trickle=240, trickle_seconds=24.0)
SHORT = Sale(shoppers=1000, units=150, trickle=120, trickle_seconds=16.0)


def log(message: str) -> None:
    print(f"[drill {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


_state: dict = {}


def _teardown() -> None:
    stack = _state.pop("stack", None)
    if stack is not None:
        stack.stop()
    if "instance" not in _state:
        return
    removed = net.cleanup(_state["instance"])
    if removed:
        log(f"removed {len(removed)} namespaces and links")


def _on_signal(signum, frame) -> None:
    log(f"signal {signum}: tearing down")
    _teardown()
    sys.exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.drill", description=__doc__)
    parser.add_argument("--drills", default="1,2,3,4,5,6", help="comma-separated drill numbers (default: all)")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.25,
        help="delay each way between hosts (tc netem, or the delay relays where the kernel has no netem)",
    )
    parser.add_argument("--short", action="store_true", help="1,000 shoppers and 150 units a drill (CI)")
    parser.add_argument("--run-dir", default="", help="where logs, histories and verdicts.json go")
    parser.add_argument(
        "--instance",
        type=int,
        default=0,
        choices=range(10),
        metavar="0-9",
        help="names sdk<N>-…, addresses 198.18.<N>.0/24: two drills side by side (default 0)",
    )
    parser.add_argument("--clean", action="store_true", help="only remove what an earlier run left, then exit")
    args = parser.parse_args(argv)
    why_not = net.available()
    if why_not:
        log(f"cannot run: {why_not}")
        return 2
    numbers = [int(n) for n in args.drills.split(",") if n.strip()]
    if unknown := [n for n in numbers if n not in DRILLS]:
        parser.error(f"no drill {unknown}; there are {sorted(DRILLS)}")
    sale = SHORT if args.short else FULL

    leftovers = net.cleanup(args.instance)  # what a crashed run left, by name
    if leftovers:
        log(f"removed leftovers of an earlier run: {', '.join(leftovers)}")
    if args.clean:
        return 0
    _state["instance"] = args.instance
    atexit.register(_teardown)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)

    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="seckill-drill-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(run_dir, 0o755)  # noqa: S103 (the postgres user reads its data directory inside)
    log(f"run directory {run_dir}")
    stack = _state["stack"] = Stack(run_dir, args.latency_ms, instance=args.instance)
    started = time.monotonic()
    stack.start(log)
    os.environ.update(stack.django_env(PATH=os.environ.get("PATH", "")))
    stack.manage("migrate", "--noinput")
    import django

    django.setup()
    for host in ("web-a", "web-b"):
        stack.start_web(host)
    stack.start_worker()
    stack.start_beat()
    supervisor = Supervisor(stack, log)
    outside = [h for h in stack.net.hosts if stack.net.can_reach_outside(h)]
    log(f"stack up in {time.monotonic() - started:.0f} s; hosts with a route out: {outside or 'none'}")

    outcomes: list[Outcome] = []
    extra: dict = {
        "latency_ms": args.latency_ms,
        "latency_by": stack.mechanism,
        "netem": stack.net.netem or "applied",
        "hosts_with_a_route_out": outside,
        "addresses": {name: host.address for name, host in stack.net.hosts.items()},
    }
    for run, number in enumerate(numbers, 1):
        drill = DRILLS[number]
        if number == 5:
            outcomes.append(_clock_drill(stack, drill, sale, run))
        elif number == 6:
            outcomes.extend(_latency_drill(stack, drill, sale, run, args.latency_ms, extra))
        else:
            outcomes.append(run_drill(stack, drill, sale, run, log))
        stack.net.heal()
        log(f"drill {number}: {'pass' if outcomes[-1].ok else 'FAIL'} {json.dumps(outcomes[-1].figures)}")
    supervisor.stop()
    extra["supervisor_restarts"] = supervisor.restarts

    table = verdict_table(outcomes)
    print(table)
    if "drill6" in extra:
        print("\n" + latency_table(extra["drill6"]))
    for o in outcomes:
        print(f"\n{o.drill}: " + "; ".join(f"{v.name}: {v.detail}" for v in o.verdicts))
        print(f"{o.drill} figures: {json.dumps(o.figures)}")
    (run_dir / "verdicts.json").write_text(
        json.dumps({"outcomes": [o.as_dict() for o in outcomes], "table": table, **extra}, indent=2)
    )
    log(f"verdicts in {run_dir / 'verdicts.json'}; {time.monotonic() - started:.0f} s in all")
    return 0 if all(o.ok for o in outcomes) else 1


def _clock_drill(stack: Stack, drill, sale: Sale, run: int) -> Outcome:
    """web-a restarted with its wall clock 2 s ahead (devtools/drill/clock/sitecustomize.py:
    a test-only offset of the clock Python reads; libfaketime hangs Python 3.11's timed waits)."""
    stack.procs["web-a"].stop()
    clock = str(Path(__file__).resolve().parent / "clock")
    stack.start_web("web-a", extra_env={"PYTHONPATH": clock, "SECKILL_DRILL_CLOCK_OFFSET": "2"})
    try:
        outcome = run_drill(stack, drill, sale, run, log)
        outcome.figures["notes"].append("web-a's Python wall clock 2 s ahead (SECKILL_DRILL_CLOCK_OFFSET=2)")
        return outcome
    finally:
        stack.procs["web-a"].stop()
        stack.start_web("web-a")


def _latency_drill(stack: Stack, drill, sale: Sale, run: int, base_ms: float, extra: dict) -> list[Outcome]:
    """The same sale with no fault at the base latency and at 5 ms each way. With netem the
    two runs; with the relays a third run first, the relays at 0 ms (what the relays cost by
    themselves), so that every run crosses the same relays and only the delay differs."""
    outcomes: list[Outcome] = []
    delays = (base_ms, 5.0) if stack.mechanism == "netem" else (0.0, base_ms, 5.0)
    for ms in delays:
        stack.set_latency(ms)
        ping_ms = _ping_ms(stack)
        cpu_before = stack.relay_cpu_s()
        outcome = run_drill(stack, drill, sale, run * 10 + len(outcomes), log, label=f"drill 6 @{ms:g} ms")
        outcome.figures["latency_ms"] = ms
        outcome.figures["latency_by"] = stack.mechanism
        outcome.figures["ping_cache_ms"] = ping_ms
        if stack.relays:
            cpu = stack.relay_cpu_s() - cpu_before
            outcome.figures["relay_cpu_s"] = round(cpu, 1)
            outcome.figures["relay_cpu_ms_per_request"] = round(1000 * cpu / max(outcome.figures["requests"], 1), 2)
        outcomes.append(outcome)
    stack.set_latency(base_ms)
    keys = ("latency_ms", "latency_by", "ping_cache_ms", "flood_requests_per_s", "flood_p50_ms", "flood_p99_ms",
            "p50_202_ms", "p99_202_ms", "redis_commands_per_202", "pg_statements_per_202", "pg_commits_per_202",
            "relay_cpu_s", "relay_cpu_ms_per_request")  # fmt: skip
    extra["drill6"] = [{k: o.figures.get(k) for k in keys} for o in outcomes]
    return outcomes


def _ping_ms(stack: Stack) -> float:
    """The median of 51 PINGs from the operator's machine to the cache Redis (one hop each
    way, as every link of the drill): what the delay really is, relay or netem."""
    import redis

    client = redis.Redis(host=stack.addr("cache"), port=6379, socket_timeout=5)
    client.ping()  # set on the new delay (a relay takes SIGHUP asynchronously)
    times = []
    for _ in range(51):
        began = time.perf_counter()
        client.ping()
        times.append(time.perf_counter() - began)
    client.close()
    return round(sorted(times)[25] * 1000, 2)


def latency_table(rows: list[dict]) -> str:
    """Drill 6's runs side by side (a Markdown table)."""
    lines = [
        "| one-way latency (by) | PING round trip | flood requests/s | flood p50 / p99 | 202s' p50 / p99 "
        "| stock cluster / cache / broker commands per 202 | PostgreSQL statements / commits per 202 "
        "| relay CPU (ms per request) | round trips on a 202's path |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = rows[0] if rows else {}
    for r in rows:
        # The 202s' median grows by one round trip (twice the one-way delay) per sequential
        # exchange on a purchase's path: client-web, web-cache, web-cluster, …
        added = 2 * (r["latency_ms"] - base["latency_ms"])
        trips = f"{(r['p50_202_ms'] - base['p50_202_ms']) / added:.1f}" if added >= 2 else "-"
        redis = r.get("redis_commands_per_202") or {}
        cpu = f"{r['relay_cpu_s']} s ({r['relay_cpu_ms_per_request']})" if r.get("relay_cpu_s") is not None else "-"
        cells = [
            f"{r['latency_ms']:g} ms ({r['latency_by']})",
            f"{r.get('ping_cache_ms')} ms",
            f"{r.get('flood_requests_per_s')}",
            f"{r.get('flood_p50_ms')} / {r.get('flood_p99_ms')} ms",
            f"{r.get('p50_202_ms')} / {r.get('p99_202_ms')} ms",
            f"{redis.get('cluster')} / {redis.get('cache')} / {redis.get('broker')}",
            f"{r.get('pg_statements_per_202')} / {r.get('pg_commits_per_202')}",
            cpu,
            trips,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
