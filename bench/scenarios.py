"""The benchmark scenarios, each followed by the invariant checker.

Every HTTP scenario goes through nginx (deploy/nginx/shop.conf, bench/stack.py's
front_start) to the project's gunicorn, as the yardstick goes through the same nginx
configuration to plain Django; the scenarios of the direct table (``via="direct"``) go
straight at gunicorn, beside the yardstick straight at its server.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Max, Sum

from orders.models import Order
from seckill.models import Activity
from seckill.sale.lifecycle import activity_stop_selling
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import ScriptCode, run_purchase

from .data import activity_new, shoppers_create
from .engine import engine_run
from .invariants import invariants_check
from .room import measure_room
from .stack import cpu_seconds, postgres_roots, redis_aof_compacted, redis_roots, rss_mb, tree_cpu
from .wrkrun import WrkResult, wrk_run
from .yardstick import figures, yardstick_measure, yardstick_tail

BIG_STOCK = 10_000_000  # "while stock lasts": never runs out during a run
# The scenarios served over HTTP by the project's gunicorn (after them: its memory).
HTTP_SCENARIOS = (
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
)
# The keep-alive scenario: this many refusals, each answer on a connection kept open.
KEEPALIVE_REFUSALS = 100_000


def say(message: str) -> None:
    sys.stderr.write(("\r" if sys.stderr.isatty() else "") + f"[bench] {message}\n")
    sys.stderr.flush()


class Bench:
    def __init__(self, *, args, front, web, worker, work_dir: Path):
        self.args, self.front, self.web, self.worker, self.work_dir = args, front, web, worker, work_dir
        # Where wrk sends: nginx (every scenario of the main table) or gunicorn itself.
        self.bases = {"nginx": front.base, "direct": web.base}
        self.base = front.base
        self.rows: list[dict] = []
        self.failures: list[str] = []
        self.tokens_file = work_dir / "tokens.txt"
        self.soldout_tokens = work_dir / "tokens-soldout.txt"
        self.user_ids: list[int] = []
        # The purchases' shoppers: "cached" ones have their token in the shared cache
        # (token_cache_fill), "cold" ones only in PostgreSQL; each 202 run takes the next
        # ones of its pool, so no web process has seen them (see fresh_tokens).
        self.pools: dict[str, list[str]] = {"cached": [], "cold": []}
        self.cursors = {"cached": 0, "cold": 0}
        self.seen: set[str] = set()  # every shopper who sent a purchase
        self.yardstick: dict[str, dict] = {}
        # The yardstick straight at its servers, beside the project's direct runs.
        self.yardstick_direct: dict[str, dict] = {}
        # {connections: [figures, …]}: the passes of the standard server with the shortest
        # tail between the purchases' rounds (purchase_rounds).
        self.tail_passes: dict[int, list[dict]] = {}

    # --- helpers -------------------------------------------------------------------

    def shoppers(self) -> None:
        """``--shoppers`` shoppers with their token in the shared cache and ``--cold-shoppers``
        more with theirs in PostgreSQL only (in the token filter, as every token is)."""
        if self.user_ids:
            return
        started = time.monotonic()
        warm, cold = self.args.shoppers, self.args.cold_shoppers
        all_tokens = self.work_dir / "tokens-all.txt"
        self.user_ids = shoppers_create(warm + cold, all_tokens)[:warm]
        tokens = all_tokens.read_text().splitlines()
        self.tokens_file.write_text("".join(f"{t}\n" for t in tokens[:warm]))
        retrying = tokens[: self.args.soldout_shoppers]
        self.soldout_tokens.write_text("".join(f"{t}\n" for t in retrying))
        self.seen.update(retrying)
        # The 202 runs' shoppers: after the retrying ones, before the warm-up's 500.
        self.pools["cached"] = tokens[self.args.soldout_shoppers : warm - 500]
        self.pools["cold"] = tokens[warm : warm + cold]
        from seckill.purchase.token_cache import token_shared_fill, token_shared_forget

        token_shared_fill()  # what an operator runs before a sale: manage.py token_cache_fill
        token_shared_forget(self.pools["cold"])
        compacted = []
        if not settings.SECKILL_REDIS_CLUSTER:  # and then, for the stock and cache Redis
            compacted = redis_aof_compacted([settings.SECKILL_REDIS_URL, settings.REDIS_URL])
        say(
            f"{warm} shoppers with API tokens in the shared cache, {cold} in PostgreSQL only,"
            f" append-only files rewritten: {', '.join(compacted) or 'none'};"
            f" ready in {time.monotonic() - started:.1f} s"
        )

    def fresh_tokens(self, pool: str, name: str) -> Path:
        """A tokens file for one purchase run: the pool from its cursor on, then from its
        start (wrk rotates through it; only a run longer than the pool reaches shoppers seen
        before)."""
        tokens, at = self.pools[pool], self.cursors[pool]
        path = self.work_dir / f"tokens-{name}.txt"
        path.write_text("".join(f"{t}\n" for t in tokens[at:] + tokens[:at]))
        return path

    def consumed(self, pool: str, requests: int) -> str:
        """Move the pool's cursor past a run's shoppers; a note when it went round."""
        tokens, at = self.pools[pool], self.cursors[pool]
        used = min(requests, len(tokens))
        self.seen.update(tokens[at : at + used] + tokens[: max(0, at + used - len(tokens))])
        self.cursors[pool] = (at + used) % max(1, len(tokens))
        if at + requests > len(tokens):
            return f"the run outlasted the {pool} pool ({len(tokens):,} shoppers): some were seen before"
        return ""

    def system_cpu(self) -> dict[str, dict[int, float]]:
        """CPU seconds so far of everything that serves a purchase, by part and by server:
        nginx (master and workers), gunicorn, Celery, PostgreSQL (postmaster and every
        backend, exited ones included) and Redis."""
        return {
            "nginx": {self.front.proc.pid: cpu_seconds(self.front.pids())},
            "web": {self.web.proc.pid: cpu_seconds(self.web.pids())},
            "worker": {self.worker.proc.pid: cpu_seconds(self.worker.pids())},
            "postgres": tree_cpu(postgres_roots()),
            "redis": tree_cpu(redis_roots()),
        }

    @staticmethod
    def cpu_per_request(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]], requests: int) -> dict:
        """The system CPU per answer, and its split by part (ms); per part, the servers that
        ran at both readings."""
        parts = {
            name: 1000 * sum(after[name][pid] - cpu for pid, cpu in servers.items() if pid in after[name])
            for name, servers in before.items()
        }
        parts = {name: ms / max(1, requests) for name, ms in parts.items()}
        return {
            "system_cpu_ms_per_req": round(sum(parts.values()), 3),
            "cpu_split_ms": {name: round(ms, 3) for name, ms in parts.items()},
        }

    def wrk(
        self, label: str, *, via: str = "nginx", repeatable: bool = False, seconds: float | None = None, **kwargs
    ) -> WrkResult:
        """One measured wrk run, through nginx or (``via="direct"``) straight at gunicorn;
        the system's CPU over the run is in ``extra["cpu"]`` (before, after). ``repeatable``
        (the answers do not depend on what ran before: the bare view, rejections): a run the
        keep-alive imbalance hit is made again once; a run that cannot be repeated is marked
        (the "note" of its row)."""

        def run() -> WrkResult:
            pids = self.web.pids()
            before = self.system_cpu()
            result = wrk_run(
                base=self.bases[via],
                seconds=seconds or self.args.seconds,
                label=label + ("" if via == "nginx" else " (direct)"),
                server_pids=pids,
                **kwargs,
            )
            result.extra["cpu"] = (before, self.system_cpu())
            return result

        result = run()
        if repeatable and result.lopsided:
            say(f"{label}: keep-alive imbalance ({result.lopsided}); measuring it again")
            first, result = result.lopsided, run()
            result.extra["repeated_after"] = first
        return result

    def orders_drained(self, activity_id: int, *, deadline_s: float = 600) -> float:
        """Wait until the reservation log is empty (every reservation has its order)."""
        from seckill.sale.snapshot import activity_shards

        started = time.monotonic()
        logs = [k.log for k in ActivityKeys(activity_id).shards(activity_shards(activity_id))]
        client = stock_redis()
        while waiting := sum(client.xlen(log) for log in logs):
            if time.monotonic() - started > deadline_s:
                raise AssertionError(f"activity {activity_id}: {waiting} reservations still without orders")
            time.sleep(0.2)
        return time.monotonic() - started

    def row(
        self,
        scenario: str,
        connections: int | None,
        result: WrkResult | None,
        *,
        expected: set[str] | None = None,
        note: str = "",
        via: str = "nginx",
        **extra,
    ) -> dict:
        """One row of the results; ``expected``: the statuses this scenario answers (the
        others are counted as unexpected); ``via``: through nginx or straight at gunicorn.
        The system's CPU per answer over the wrk run, unless ``extra`` has it already (the
        purchases': until their last order)."""
        row: dict = {"scenario": scenario, "connections": connections}
        if result is not None:
            row["via"] = via
            row.update(figures(result, expected or set(result.statuses)))
            if "cpu" in result.extra and "cpu_split_ms" not in extra:
                row.update(self.cpu_per_request(*result.extra["cpu"], result.requests))
            notes = [note] if note else []
            if result.extra.get("repeated_after"):
                notes.append(f"measured again: the first run was lopsided ({result.extra['repeated_after']})")
            if result.lopsided:
                notes.append(f"keep-alive imbalance: {result.lopsided}")
            if notes:
                row["note"] = "; ".join(notes)
        row.update(extra)
        self.rows.append(row)
        shown = {k: v for k, v in row.items() if k not in ("statuses",)}
        say(f"{scenario} c={connections}: {json.dumps(shown, default=str)}")
        return row

    def settled(self, activity_id: int, *, deadline_s: float = 120) -> None:
        """Wait until nothing moves: wrk stops sending at its deadline, but the server
        still answers what sits in its queue, and a check mid-commit would read a torn state."""
        from inventory.models import SeckillStock

        def state():
            return (
                Order.objects.filter(activity_id=activity_id).count(),
                SeckillStock.objects.filter(activity_id=activity_id).values_list("available", flat=True).first(),
                stock_redis().xlen(ActivityKeys(activity_id).log),
                stock_redis().get(ActivityKeys(activity_id).stock),
            )

        started = time.monotonic()
        last = state()
        while time.monotonic() - started < deadline_s:
            time.sleep(1.0)
            now = state()
            if now == last:
                return
            last = now
        raise AssertionError(f"activity {activity_id} still moving after {deadline_s} s")

    def checked(self, activity_id: int, *, redis_path: bool = True) -> dict:
        self.settled(activity_id)
        report = invariants_check(activity_id=activity_id, redis_path=redis_path)  # raises when broken
        return {
            "oversell": 0,
            "invariants": "ok",
            "sold_units": report["live_order_units"] + report["reserved_not_ordered"],
        }

    def purchase_body(self, activity) -> str:
        return json.dumps({"token": activity.purchase_token, "quantity": 1})

    # --- scenarios -----------------------------------------------------------------

    def warm_up(self) -> None:
        """Every worker imports what the purchase path imports lazily and opens its
        connections before anything is measured. Shoppers from the end of the list, so
        the measured runs do not find their tokens already cached."""
        activity = activity_new(title="bench warm-up", stock=BIG_STOCK)
        tokens = self.work_dir / "tokens-warmup.txt"
        tokens.write_text("".join(f"{t}\n" for t in self.tokens_file.read_text().splitlines()[-500:]))
        wrk_run(base=self.base, method="GET", path="/api/ping", connections=20, seconds=2, label="warm-up")
        wrk_run(
            base=self.base,
            method="POST",
            path=f"/api/activities/{activity.pk}/purchase",
            connections=20,
            seconds=2,
            tokens_file=tokens,
            body=self.purchase_body(activity),
            label="warm-up",
        )
        self.seen.update(tokens.read_text().split())
        self.orders_drained(activity.pk)

    def run(self, *, only: list[str], connections: list[int]) -> list[dict]:
        self.shoppers()
        self.warm_up()
        if "yardstick" in only:
            self.yardstick_pass("before", connections)
        for c in connections:
            if "ping" in only:
                self.ping(c, "project bare view (context)")
                self.ping(c, "project bare view, API chain (context)", tokens=True)
            if "early" in only:
                self.early(c)
            if "soldout" in only:
                self.soldout(c)
            if "gates" in only:
                self.gates(c)
            if "duplicate" in only:
                self.duplicate(c)
            if "purchase" in only:
                self.purchase_rounds(c)
            if "room" in only:
                self.room(c)
            if "sharded" in only:
                self.purchase(c, shards=8)
            if "naive" in only:
                self.naive(c)
        if "flood" in only:
            self.flood()
        if "keepalive" in only:
            for via in ("nginx", "direct"):
                self.keepalive(max(connections), via=via)
        if "direct" in only:
            self.direct(only, self.args.direct_connections or connections[:1])
        if any(s in only for s in HTTP_SCENARIOS):
            self.memory()
        if "yardstick" in only:
            self.yardstick_pass("after", connections)
        if "drain" in only:
            self.drain()
        if "engine" in only:
            self.engine()
        return self.rows

    def yardstick_pass(self, when: str, connections: list[int]) -> None:
        """Plain Django on the three standard servers (bench/yardstick.py), the same wrk
        settings; the project's web processes and worker stay up, idle, meanwhile."""
        say(f"the yardstick, {when} the project's scenarios…")
        measured = yardstick_measure(seconds=self.args.seconds, connections=connections, log_dir=self.work_dir, say=say)
        self.yardstick[when] = measured
        for server, by_c in measured.items():
            for c, figures_c in by_c.items():
                self.rows.append({"scenario": f"plain Django, {server}", "connections": c, "pass": when, **figures_c})

    def purchase_rounds(self, c: int) -> None:
        """The purchases at ``c`` (tokens cached, then not). With the yardstick's passes in
        the run and ``--tail-rounds`` R > 1: R rounds, each after a pass of the standard
        server whose p99 was the shortest in the pass before the scenarios, and one such pass
        after the last. The machine's speed drifts within minutes (the same server's p99 has
        moved 2.5x between passes an hour apart), so the purchases' tail is compared with
        the yardstick's measured beside it, over several rounds, not with passes minutes
        away. The first round's rows are the main table's."""
        rounds = self.args.tail_rounds if "before" in self.yardstick else 1
        server = yardstick_tail(self.yardstick["before"])[c]["server"] if rounds > 1 else None
        for n in range(1, rounds + 1):
            if server:
                self.tail_pass(server, c)
            self.purchase(c, tail_round=n)
            if self.pools["cold"]:
                self.purchase(c, pool="cold", tail_round=n)
        if server:
            self.tail_pass(server, c)

    def direct(self, only: list[str], connections: list[int]) -> None:
        """The direct table: plain Django straight at each standard server, then those of
        the purchase and early-refusal scenarios the run has, straight at the project's
        gunicorn (nginx idle), at ``connections``."""
        say("straight at the servers, without nginx: the yardstick, then the project…")
        self.yardstick_direct = yardstick_measure(
            seconds=self.args.seconds, connections=connections, log_dir=self.work_dir, say=say, front=False
        )
        for c in connections:
            if "early" in only:
                self.early(c, via="direct")
            if "soldout" in only:
                self.soldout(c, via="direct")
            if "purchase" in only:
                self.purchase(c, via="direct")
                if self.pools["cold"]:
                    self.purchase(c, pool="cold", via="direct")

    def tail_pass(self, server: str, c: int) -> None:
        """One pass of plain Django on ``server`` at ``c`` (the project idle meanwhile)."""
        measured = yardstick_measure(
            seconds=self.args.seconds, connections=[c], servers=[server], log_dir=self.work_dir, say=say
        )
        self.tail_passes.setdefault(c, []).append(dict(measured[server][c], server=server))

    def ping(self, c: int, name: str, tokens: bool = False) -> None:
        """The project's bare view (server/ping.py); with ``tokens`` every request carries a
        shopper's API token, so it takes the short API middleware chain (server/handlers.py).
        Context: the ratios are to the yardstick."""
        result = self.wrk(
            f"{name} c={c}",
            method="GET",
            path="/api/ping",
            connections=c,
            tokens_file=self.tokens_file if tokens else None,
            repeatable=True,
        )
        self.row(name, c, result, expected={"200"}, oversell=0, invariants="n/a (no stock)")

    def early(self, c: int, via: str = "nginx") -> None:
        """The refusals that are the same for every shopper, sent as a flood sends them:
        a shopper's token and a well-formed body. An activity that does not exist; one that
        starts in an hour (no purchase token yet: the body carries a made-up one, as a
        shopper guessing it would); one the merchant ended (``activity_stop_selling``, the
        admin's "end it"), with the token it had."""
        unknown_id = (Activity.objects.aggregate(m=Max("pk"))["m"] or 0) + 1_000_000
        body = json.dumps({"token": secrets.token_urlsafe(24), "quantity": 1})
        self.refusals("unknown activity (404)", c, unknown_id, body, expected={"404"}, via=via)
        later = activity_new(title=f"bench not started c={c} {via}", stock=BIG_STOCK, starts_in=timedelta(hours=1))
        self.refusals("not started (403)", c, later.pk, body, expected={"403"}, activity=later, via=via)
        ended = activity_new(title=f"bench ended c={c} {via}", stock=BIG_STOCK)
        body_ended = self.purchase_body(ended)
        activity_stop_selling(activity_id=ended.pk)
        self.refusals("ended (403)", c, ended.pk, body_ended, expected={"403"}, activity=ended, via=via)

    def sold_out(self, c: int, name: str):
        """A 100-unit activity sold out through the purchase endpoint (through nginx) by
        the retrying shoppers; returns it and the body its purchases carry."""
        activity = activity_new(title=f"bench {name}", stock=100)
        body = self.purchase_body(activity)
        path = f"/api/activities/{activity.pk}/purchase"
        self.orders_drained(activity.pk)
        # wrk drops the answers in flight when its time is up, so Redis says when it is over.
        stock_key = ActivityKeys(activity.pk).stock
        for _ in range(10):
            wrk_run(
                base=self.base,
                method="POST",
                path=path,
                connections=c,
                seconds=2,
                tokens_file=self.soldout_tokens,
                body=body,
                label=f"selling out c={c}",
            )
            if stock_redis().get(stock_key) == b"0":
                break
        else:
            raise AssertionError(f"activity {activity.pk} did not sell out")
        return activity, body

    def soldout(self, c: int, via: str = "nginx") -> None:
        # Sell it out first, through the same endpoint, then measure the rejections.
        activity, body = self.sold_out(c, f"sold out c={c} {via}")
        # 409 for the 100 who bought one.
        self.refusals("sold out (410)", c, activity.pk, body, expected={"410", "409"}, activity=activity, via=via)

    def keepalive(self, c: int, via: str) -> None:
        """KEEPALIVE_REFUSALS refusals over ``c`` connections wrk keeps open (nginx closes a
        client's after 1,000 requests, its default keepalive_requests, and wrk opens another):
        an activity that does not exist (404), then one sold out (410). The retrying shoppers'
        tokens, each request another in rotation until KEEPALIVE_REFUSALS are sent (wrk's
        once mode: a thread that has sent its share asks for the bare view until each refusal
        has its answer). Measured: every answer, and no transport error."""
        n = KEEPALIVE_REFUSALS
        retrying = self.soldout_tokens.read_text().split()
        tokens = self.work_dir / "tokens-keepalive.txt"
        tokens.write_text("".join(f"{retrying[i % len(retrying)]}\n" for i in range(n)))
        unknown_id = (Activity.objects.aggregate(m=Max("pk"))["m"] or 0) + 1_000_000
        made_up = json.dumps({"token": secrets.token_urlsafe(24), "quantity": 1})
        sold, sold_body = self.sold_out(c, f"keep-alive sold out {via}")
        runs = (
            (f"{n:,} refusals over keep-alive: unknown activity (404)", unknown_id, made_up, {"404"}, None),
            (f"{n:,} refusals over keep-alive: sold out (410)", sold.pk, sold_body, {"410", "409"}, sold),
        )
        for name, activity_id, body, expected, activity in runs:
            result = self.wrk(
                f"{name} c={c}",
                via=via,
                method="POST",
                path=f"/api/activities/{activity_id}/purchase",
                connections=c,
                seconds=300,  # a bound: the script stops once every refusal has its answer
                tokens_file=tokens,
                body=body,
                once=True,
            )
            answered = sum(count for code, count in result.statuses.items() if code in expected)
            checked = self.checked(activity.pk) if activity is not None else {"invariants": "n/a (no activity)"}
            self.row(
                name,
                c,
                result,
                expected=expected | {"200"},  # 200: the bare view a finished thread asks for
                via=via,
                kind="keepalive",
                sent=n,
                answered=answered,
                fill_in_pings=result.count("200"),
                **checked,
            )

    GATES = (
        ("rate limited (per shopper, 429)", {"rate_per_user": "1/h", "rate_per_ip": "off"}),
        ("rate limited (per address, 429)", {"rate_per_user": "off", "rate_per_ip": "1/h"}),
        (
            "rate limited (admission cap, 429)",
            {"rate_per_user": "off", "rate_per_ip": "off", "admission_rate": 1, "admission_burst": 1},
        ),
    )

    def allowance_use(self, c: int, activity) -> None:
        """Every retrying shopper's one allowed attempt (each token once), so that what is
        measured next is the refusal."""
        wrk_run(
            base=self.base,
            method="POST",
            path=f"/api/activities/{activity.pk}/purchase",
            connections=c,
            seconds=120,
            tokens_file=self.soldout_tokens,
            body=self.purchase_body(activity),
            once=True,
            label=f"using up the allowance c={c}",
        )

    def gates(self, c: int) -> None:
        """The 429s: the per-shopper and per-address limits (fixed windows, lua/shopper_gate.lua)
        and the activity's admission cap (token bucket), each on an activity with stock to spare."""
        for name, gates in self.GATES:
            activity = activity_new(title=f"bench {name} c={c}", stock=BIG_STOCK, **gates)
            self.allowance_use(c, activity)
            body = self.purchase_body(activity)
            # The retrying shoppers each bought their unit with their one allowed attempt, so
            # a process that remembers them as taken part answers 409 before the limits
            # (seckill/took_part.py); the cap admits one a second.
            expected = {"429", "409", "202"} if "admission_rate" in gates else {"429", "409"}
            self.refusals(name, c, activity.pk, body, expected=expected, activity=activity)

    def duplicate(self, c: int) -> None:
        """The 409s: the retrying shoppers have each bought their one unit (per-shopper
        limit 1) and keep trying; no rate limit, so what answers is the duplicate check."""
        activity = activity_new(title=f"bench duplicate c={c}", stock=BIG_STOCK, rate_per_user="off", rate_per_ip="off")
        self.allowance_use(c, activity)
        self.orders_drained(activity.pk)
        body = self.purchase_body(activity)
        self.refusals("duplicate (409)", c, activity.pk, body, expected={"409"}, activity=activity)

    def refusals(
        self,
        name: str,
        c: int,
        activity_id: int,
        body: str,
        *,
        expected: set[str],
        activity=None,
        via: str = "nginx",
    ) -> None:
        """The measured run of a scenario answered with refusals: the retrying shoppers
        against an activity that turns them away; then its invariants (when it exists)."""
        result = self.wrk(
            f"{name} c={c}",
            via=via,
            method="POST",
            path=f"/api/activities/{activity_id}/purchase",
            connections=c,
            tokens_file=self.soldout_tokens,
            body=body,
            repeatable=True,
        )
        if activity is None:
            self.row(name, c, result, expected=expected, via=via, oversell=0, invariants="n/a (no activity)")
            return
        self.orders_drained(activity.pk)
        self.row(name, c, result, expected=expected, via=via, **self.checked(activity.pk))

    def purchase(self, c: int, shards: int = 1, pool: str = "cached", tail_round: int = 1, via: str = "nginx") -> None:
        """Stock lasts, every request another shopper nobody served before: tokens in the
        shared cache (``pool`` "cached") or in PostgreSQL only ("cold"); with shards > 1 the
        same on S stock keys (claim, random shard). The CPU split runs until the last order
        of the run is written. ``tail_round``: which of purchase_rounds' rounds this is;
        ``via``: through nginx or straight at gunicorn."""
        cache = "tokens in the shared cache" if pool == "cached" else "tokens not cached"
        name = f"purchase (202), {cache}" if shards == 1 else f"purchase, S = {shards} shards (context)"
        lopsided_first = ""
        for attempt in (1, 2):
            activity = activity_new(
                title=f"bench {name} c={c} round {tail_round} #{attempt} {via}", stock=BIG_STOCK, shards=shards
            )
            tokens = self.fresh_tokens(pool, f"{pool}-{shards}-{c}-{tail_round}-{attempt}-{via}")
            cpu_before = self.system_cpu()
            result = self.wrk(
                f"{name} c={c}",
                via=via,
                method="POST",
                path=f"/api/activities/{activity.pk}/purchase",
                connections=c,
                tokens_file=tokens,
                body=self.purchase_body(activity),
            )
            drain = self.orders_drained(activity.pk)
            cpu = self.cpu_per_request(cpu_before, self.system_cpu(), result.requests)
            note = self.consumed(pool, result.requests)
            checked = self.checked(activity.pk)
            if attempt == 1 and result.lopsided:
                # Measured again on a new activity with the next shoppers: a run's answers
                # depend on who has bought before, so the same run cannot be repeated.
                say(f"{name} c={c}: keep-alive imbalance ({result.lopsided}); measuring it again")
                lopsided_first = result.lopsided
                continue
            break
        if lopsided_first:
            result.extra["repeated_after"] = lopsided_first
        self.row(
            name,
            c,
            result,
            expected={"202"},
            note=note,
            via=via,
            orders_drained_s=round(drain, 1),
            tail_round=tail_round,
            **cpu,
            **checked,
        )

    def room(self, c: int) -> None:
        """The waiting room (bench/room.py's measure_room) through nginx on a live room
        sale of its own: joins of shoppers new to it (the next ones of the cached pool),
        joins again of those, and the status poll, which nginx keeps for its second
        (Cache-Control: public, max-age=1)."""
        activity = activity_new(
            title=f"bench room c={c}", stock=BIG_STOCK, admission_mode="room", room_rate=1000, room_cap=0
        )
        tokens = self.fresh_tokens("cached", f"room-{c}")
        left = len(self.pools["cached"]) - self.cursors["cached"]
        measured = measure_room(
            base=self.base,
            activity_id=activity.pk,
            tokens=tokens,
            shoppers=left,
            seconds=self.args.seconds,
            connections=c,
            pids=self.web.pids(),
        )
        note = self.consumed("cached", measured["join (new place)"]["requests"])
        for name, figures_row in measured.items():
            row = {"scenario": f"waiting room: {name}", "connections": c, "via": "nginx", **figures_row}
            if name == "join (new place)" and note:
                row["note"] = note
            self.rows.append(row)
            say(f"waiting room: {name} c={c}: {figures_row['rps']:,.0f} req/s, p99 {figures_row['p99_ms']:.1f} ms")

    def naive(self, c: int) -> None:
        activity = activity_new(title=f"bench db-direct c={c}", stock=BIG_STOCK, warm=False)
        tokens = self.fresh_tokens("cached", f"naive-{c}")
        cpu_before = self.system_cpu()
        result = self.wrk(
            f"database-direct purchase c={c}",
            method="POST",
            path=f"/api/bench/activities/{activity.pk}/purchase-db",
            connections=c,
            tokens_file=tokens,
            body=self.purchase_body(activity),
        )
        self.row(
            "database-direct purchase (context)",
            c,
            result,
            expected={"202"},
            note=self.consumed("cached", result.requests),
            **self.cpu_per_request(cpu_before, self.system_cpu(), result.requests),
            **self.checked(activity.pk, redis_path=False),
        )

    def memory(self) -> None:
        """Each web process's resident memory now, after every shopper above sent purchases."""
        pids = self.web.pids()
        workers = {pid: rss_mb(pid) for pid in pids[1:]}
        self.row(
            "resident memory per web process",
            None,
            None,
            distinct_shoppers=len(self.seen),
            master_rss_mb=round(rss_mb(pids[0]) or 0, 1),
            workers_rss_mb=[round(mb, 1) for mb in workers.values() if mb is not None],
        )

    def flood(self) -> None:
        stock = self.args.flood_stock
        shoppers = min(10 * stock, len(self.user_ids))
        activity = activity_new(title="bench flood", stock=stock)
        tokens = self.work_dir / "tokens-flood.txt"
        tokens.write_text("".join(f"{t}\n" for t in self.tokens_file.read_text().splitlines()[:shoppers]))
        self.seen.update(tokens.read_text().split())
        t0 = time.time()
        result = wrk_run(
            base=self.base,
            method="POST",
            path=f"/api/activities/{activity.pk}/purchase",
            connections=200,
            seconds=300,  # a bound; the script stops once every shopper has an answer
            tokens_file=tokens,
            body=self.purchase_body(activity),
            once=True,
            label=f"flood: {shoppers} shoppers for {stock} units",
            server_pids=self.web.pids(),
        )
        t_answers = t0 + result.extra["wall"]
        self.orders_drained(activity.pk, deadline_s=300)
        orders = Order.objects.filter(activity_id=activity.pk)
        last_order = orders.aggregate(last=Max("created_at"))["last"]
        units = orders.aggregate(u=Sum("quantity"))["u"] or 0
        # A reservation id is the Redis time (ms) of the successful purchase answer.
        last_sale_ms = max(int(rid.split("-", 1)[0]) for rid in orders.values_list("reservation_id", flat=True))
        checked = self.checked(activity.pk)
        answered = result.requests - result.count("200")  # the rest were fill-in pings
        sold_all = units == stock and stock_redis().get(ActivityKeys(activity.pk).stock) == b"0"
        if not sold_all:
            raise AssertionError(f"flood: {units} of {stock} units in orders")
        self.row(
            "flood (10x stock, c=200)",
            200,
            None,
            shoppers=shoppers,
            stock=stock,
            answered=answered,
            queued_202=result.count("202"),
            sold_out_410=result.count("410"),
            errors_5xx=result.count("5"),
            socket_errors=result.socket_errors,
            socket_error_kinds={k: v for k, v in result.errors.items() if v and k != "status"},
            p99_ms=result.latency_us["p99"] / 1000,
            last_answer_s=round(t_answers - t0, 2),
            first_request_to_last_sale_s=round(last_sale_ms / 1000 - t0, 2),
            first_request_to_last_order_s=round(last_order.timestamp() - t0, 2),
            last_sale_to_last_order_s=round(last_order.timestamp() - last_sale_ms / 1000, 2),
            every_unit_sold=sold_all,
            **checked,
        )

    def _reservations(self, activity, n: int) -> float:
        client, keys = stock_redis(), ActivityKeys(activity.pk)
        started = time.monotonic()
        for user_id in self.user_ids[:n]:
            reply = run_purchase(client, keys, user_id=user_id, quantity=1, limit=1)
            if reply.code != ScriptCode.RESERVED:
                raise AssertionError(f"reservation for {user_id} failed: {reply}")
        return time.monotonic() - started

    def drain(self) -> None:
        from orders.tasks import order_create_task
        from seckill.sale.replay import reservations_drain
        from stock.reservations import reservations_pending

        n = min(self.args.drain_reservations, len(self.user_ids))
        # Single: one Celery task per reservation, as the purchase path enqueues them.
        activity = activity_new(title="bench drain single", stock=n)
        self._reservations(activity, n)
        entries = reservations_pending(activity_id=activity.pk, count=n)
        before = cpu_seconds(self.worker.pids())
        started = time.monotonic()
        for e in entries:
            order_create_task.apply_async(args=[activity.pk, e.reservation_id, e.user_id, e.quantity, e.shard])
        enqueued = time.monotonic() - started
        deadline = self.args.drain_single_deadline
        log, client = ActivityKeys(activity.pk).log, stock_redis()
        while client.xlen(log) and time.monotonic() - started < deadline:
            time.sleep(0.2)
        seconds = time.monotonic() - started
        done = Order.objects.filter(activity_id=activity.pk).count()
        worker_cpu = (cpu_seconds(self.worker.pids()) - before) / seconds
        if done < n:
            # Bounded: drop the queued tasks and let the batched consumer finish the rest,
            # so the invariants are checked on a settled activity.
            from config.celery_app import app

            app.control.purge()
            reservations_drain(activity_id=activity.pk)
            self.orders_drained(activity.pk)
        self.row(
            "order drain: single task per reservation",
            None,
            None,
            reservations=n,
            orders_made=done,
            seconds=round(seconds, 2),
            orders_per_s=round(done / seconds, 1),
            projected_s_for_all=round(n * seconds / max(done, 1), 1),
            enqueue_s=round(enqueued, 2),
            worker_cpu=round(worker_cpu, 2),
            celery_concurrency=self.args.celery_concurrency,
            **self.checked(activity.pk),
        )
        # Batched: the replay consumer, SECKILL_ORDER_BATCH_SIZE orders per transaction.
        from django.conf import settings

        activity = activity_new(title="bench drain batched", stock=n)
        self._reservations(activity, n)
        started = time.monotonic()
        outcome = reservations_drain(activity_id=activity.pk)
        seconds = time.monotonic() - started
        if outcome.created != n:
            raise AssertionError(f"batched drain created {outcome.created} of {n}")
        self.row(
            f"order drain: batched ({settings.SECKILL_ORDER_BATCH_SIZE} per transaction, one process)",
            None,
            None,
            reservations=n,
            seconds=round(seconds, 2),
            orders_per_s=round(n / seconds, 1),
            **self.checked(activity.pk),
        )

    def engine(self) -> None:
        p, s = self.args.engine_processes, self.args.engine_seconds
        activity = activity_new(title="bench engine lua", stock=BIG_STOCK)
        lua = engine_run(kind="lua", activity_id=activity.pk, processes=p, seconds=s, user_ids=[])
        checked = self.checked(activity.pk)
        self.row("stock engine alone: Lua script", None, None, **lua, **checked)
        # The Lua run left its reservations in the log on purpose (no orders for made-up
        # shoppers); free the memory now that the invariants are checked.
        stock_redis().unlink(*ActivityKeys(activity.pk).all())
        depth = self.args.engine_pipeline
        activity = activity_new(title="bench engine lua pipelined", stock=BIG_STOCK)
        piped = engine_run(kind="lua", activity_id=activity.pk, processes=p, seconds=s, user_ids=[], depth=depth)
        checked = self.checked(activity.pk)
        self.row(f"stock engine alone: Lua script, {depth} calls per round trip", None, None, **piped, **checked)
        stock_redis().unlink(*ActivityKeys(activity.pk).all())
        activity = activity_new(title="bench engine db", stock=BIG_STOCK, warm=False)
        dbr = engine_run(kind="db", activity_id=activity.pk, processes=p, seconds=s, user_ids=self.user_ids)
        self.row(
            "stock engine alone: database (order insert + conditional UPDATE)",
            None,
            None,
            **dbr,
            **self.checked(activity.pk, redis_path=False),
        )
