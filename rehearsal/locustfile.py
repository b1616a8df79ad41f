"""A sale rehearsal with Locust:

    locust -f rehearsal/locustfile.py --host https://staging.example --headless \\
        --activity 42 --tokens tokens.txt --admin rehearsal-admin-x --admin-password ... --out report/

shoppers who shop as the pages do (rehearsal.journeys), arriving as a flood does
(rehearsal.arrival), the answers in a journal, the sale watched through its API and the
admin's live JSON, then a report with charts and a verdict (exit status 1 when red). Without
--headless Locust's web UI runs it; --master / --worker spread the shoppers over machines
(each worker with the same --tokens file and --rehearsal-workers N)."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from rehearsal.arrival import Arrival, ArrivalShape
from rehearsal.journal import JOURNAL, MESSAGE, SAMPLES, read_lines
from rehearsal.journeys import CODED, Plan, Shopper, answer_code
from rehearsal.report import write as write_report
from rehearsal.shop import Shop, epoch
from rehearsal.verdict import judge

__all__ = ["ArrivalShape", "Shopper"]

# The spike asks for thousands of users a second on purpose: Locust's warning about it, once a
# tick, would bury the progress line.
logging.getLogger("locust.runners").addFilter(lambda record: "spawn rate is very high" not in record.getMessage())


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    group = parser.add_argument_group("rehearsal")
    group.add_argument("--activity", type=int, env_var="REHEARSAL_ACTIVITY", default=0, help="the rehearsal sale's id")
    group.add_argument("--tokens", env_var="REHEARSAL_TOKENS", default="", help="the shoppers' API tokens, one a line")
    group.add_argument("--shoppers", type=int, default=0, help="shoppers to send (default: one per token)")
    group.add_argument("--arrival", default="0.3,0.6,0.1", help="shares arriving before, at and after the start")
    group.add_argument("--spike-seconds", type=float, default=3.0)
    group.add_argument("--tail-seconds", type=float, default=20.0)
    group.add_argument("--settle-seconds", type=float, default=90.0, help="after the last arrival: orders, deadlines")
    group.add_argument("--mix", default="0.8,0.1,0.1", help="shares of the winners who pay, cancel, let it expire")
    group.add_argument("--admin", env_var="REHEARSAL_ADMIN", default="", help="an admin account (live JSON)")
    group.add_argument("--admin-password", env_var="REHEARSAL_ADMIN_PASSWORD", default="")
    group.add_argument("--verdict-wait", type=float, default=120.0, help="at most, for the unpaid orders' deadlines")
    group.add_argument("--p99-target", type=float, default=500.0, help="ms: the capacity is the rate under it")
    group.add_argument("--out", default="rehearsal-report", help="the report's folder")
    group.add_argument("--source-addresses", action="store_true", help="each shopper from its own 127.x address")
    group.add_argument("--rehearsal-workers", type=int, default=1, help="with --master/--worker: how many workers")


def _plan(environment) -> None:
    """What every shopper of this process shares."""
    o = environment.parsed_options
    Plan.activity = o.activity
    Plan.tokens = [t.strip() for t in Path(o.tokens).read_text().splitlines() if t.strip()] if o.tokens else []
    Plan.mix = tuple(float(p) for p in o.mix.split(","))  # type: ignore[assignment]
    Plan.source_addresses = o.source_addresses
    Plan.workers = max(1, o.rehearsal_workers)


@events.init.add_listener
def _init(environment, **_kw) -> None:
    """Before the shape's first tick: the plan, the sale, the arrival, the journal."""
    runner, o = environment.runner, environment.parsed_options
    if o is None or not o.activity:
        return
    if isinstance(runner, MasterRunner):
        runner.register_message(MESSAGE, lambda msg, **_: JOURNAL.received(msg.data))
    _plan(environment)
    shop = Shop(environment.host, o.activity, admin=o.admin or None, password=o.admin_password or None)
    Plan.room = bool(shop.room())
    if isinstance(runner, WorkerRunner):
        return
    sale = shop.sale()
    if sale is None:
        sys.exit(f"rehearsal: sale {o.activity} not found at {environment.host}")
    environment.rehearsal = {"shop": shop, "sale": sale, "offset": 0.0}
    shoppers = o.shoppers or len(Plan.tokens)
    ArrivalShape.arrival = Arrival.parse(
        o.arrival,
        shoppers=shoppers,
        lead_s=max(1.0, (epoch(sale["start_at"]) or time.time()) - time.time()),
        spike_s=o.spike_seconds,
        tail_s=o.tail_seconds,
        settle_s=o.settle_seconds,
    )
    if not isinstance(runner, MasterRunner):
        ArrivalShape.done = staticmethod(lambda: Plan.finished >= shoppers)
    JOURNAL.open(Path(o.out))
    gevent.spawn(_watch, environment)


@events.test_start.add_listener
def _start(environment, **_kw) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        Plan.worker_index = runner.worker_index
        JOURNAL.send = runner.send_message
        gevent.spawn(_flush_forever)


@events.request.add_listener
def _answered(name, response_time, response, context, exception, start_time=None, **_kw) -> None:
    if not isinstance(context, dict) or "shopper" not in context:
        return
    status = getattr(response, "status_code", 0) or 0
    t = start_time if start_time is not None else time.time() - response_time / 1000
    code = answer_code(response) if name in CODED else ""
    JOURNAL.add({"t": t, "ms": response_time, "n": name, "s": status, "c": code, "u": context["shopper"]})


def _flush_forever() -> None:
    while True:
        gevent.sleep(1.0)
        JOURNAL.flush()


def _watch(environment) -> None:
    """Every second: the flag, the room's status and the admin's live JSON into the samples;
    every two, the progress line."""
    state, o = environment.rehearsal, environment.parsed_options
    shop: Shop = state["shop"]
    samples = Path(o.out) / SAMPLES
    samples.write_text("")
    last_line = 0.0
    while True:
        now = time.time()
        sample = {"t": now, "flag": shop.flag(), "room": shop.room() if Plan.room else None, "live": shop.live()}
        # The load generator's own CPU (Locust measures it): near 100 %, its clock is late too.
        sample["locust_cpu"] = getattr(environment.runner, "current_cpu_usage", None)
        server = epoch((sample["flag"] or {}).get("server_time"))
        if server is not None:
            state["offset"] = server - (now + time.time()) / 2
        with samples.open("a") as out:
            out.write(json.dumps(sample) + "\n")
        JOURNAL.flush()
        if now - last_line >= 2 and environment.parsed_options.headless:
            last_line = now
            print(_progress(environment, sample), flush=True)
        gevent.sleep(max(0.0, 1.0 - (time.time() - now)))


def _progress(environment, sample) -> str:
    stats = environment.stats.total
    start = epoch(environment.rehearsal["sale"]["start_at"]) or time.time()
    live, flag = sample.get("live") or {}, sample.get("flag") or {}
    orders = live.get("orders") or {}
    parts = [
        f"[rehearsal] {time.time() - start:+6.0f}s from the start",
        f"shoppers {environment.runner.user_count}",
        f"requests {stats.num_requests} ({stats.current_rps:.0f}/s, {stats.num_failures} failed)",
        f"left {flag.get('remaining')}",
        f"Locust CPU {sample.get('locust_cpu') or 0:.0f}%",
        f"sold {live.get('sold', '?')} (paid {orders.get('paid', '?')}, pending {orders.get('pending', '?')})",
    ]
    room = sample.get("room")
    if room:
        parts.append(f"room {room.get('state')} waiting {room.get('waiting')} serving {room.get('now_serving')}")
    return " | ".join(parts)


def _settled(shop: Shop, patience: float) -> None:
    """Until the sale stands still (the admin's live JSON): every reservation has its order and
    no order is waiting for payment (paid, cancelled or expired), so that each shopper's orders,
    read one after the other, and the admin's count describe one state. At most ``patience``
    seconds; sooner when the reservations without an order stay the same for 20 s (no worker
    turns them into orders: the verdict will say so)."""
    deadline, unordered, since = time.time() + patience, None, time.time()
    while time.time() < deadline:
        live = shop.live()
        if live is None:
            return
        pending, now_unordered = live["orders"]["pending"], live.get("reserved_not_ordered") or 0
        if not pending and not now_unordered:
            return
        if now_unordered != unordered:
            unordered, since = now_unordered, time.time()
        elif now_unordered and time.time() - since > 20:
            return
        time.sleep(1.0)


@events.quitting.add_listener
def _verdict(environment, **_kw) -> None:
    if isinstance(environment.runner, WorkerRunner) or not hasattr(environment, "rehearsal"):
        return
    o, state = environment.parsed_options, environment.rehearsal
    JOURNAL.flush()
    out = Path(o.out)
    lines, samples = read_lines(out / "answers.jsonl"), read_lines(out / SAMPLES)
    shop: Shop = state["shop"]
    print("[rehearsal] reading every shopper's orders and the admin's live view…", flush=True)
    print("[rehearsal] waiting for the sale to stand still (orders paid, cancelled or expired)…", flush=True)
    _settled(shop, o.verdict_wait)
    verdict = judge(
        lines=lines,
        orders=shop.orders_of(Plan.tokens[: o.shoppers or len(Plan.tokens)]),
        live=shop.live(),
        sale=shop.sale() or state["sale"],
        clock_offset=state["offset"],
        p99_target_ms=o.p99_target,
    )
    cpu = [s["locust_cpu"] for s in samples if s.get("locust_cpu") is not None]
    verdict.figures["locust_cpu_peak_percent"] = round(max(cpu, default=0), 1)
    start = (epoch(state["sale"]["start_at"]) or 0) - state["offset"]
    path = write_report(
        out,
        verdict=verdict,
        lines=lines,
        samples=samples,
        start=start,
        title=state["sale"]["title"],
        target_ms=o.p99_target,
    )
    for check in verdict.checks:
        print(f"[rehearsal] {'green' if check.ok else 'RED  '} {check.name}: {check.detail}", flush=True)
    print(f"[rehearsal] figures: {json.dumps({k: v for k, v in verdict.figures.items() if k != 'slowest'})}")
    print(f"[rehearsal] verdict {'green' if verdict.green else 'RED'}; report: {path}", flush=True)
    if not verdict.green:
        environment.process_exit_code = 1
