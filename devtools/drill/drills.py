"""The six drills: a sale on the drill's hosts, a fault injected mid-sale and repaired,
a settle period, then the checker."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from .checker import Outcome, check, read_history
from .procs import BIN, Proc, wait_until
from .stack import CLUSTER, Stack


@dataclass
class Sale:
    shoppers: int
    units: int
    trickle: int  # shoppers arriving one by one while the fault happens
    trickle_seconds: float


@dataclass
class Drill:
    number: int
    title: str
    fault_at: float  # seconds after the load starts
    fault: Callable[[Stack, dict], str]  # returns what it did, for the note
    repair_after: float
    repair: Callable[[Stack, dict], str]
    explained_anomalies: set[str] = field(default_factory=set)
    lost_write_explained: bool = False
    note: str = ""
    start_in: float = -5.0  # seconds from now to the sale's start (drill 5 watches it open)


# --- faults ------------------------------------------------------------------------------


def _partition_web_a(stack: Stack, ctx: dict) -> str:
    stack.net.cut("web-a", CLUSTER)
    return "web-a's packets to the six cluster nodes dropped (web-b, worker and beat keep them)"


def _heal(stack: Stack, ctx: dict) -> str:
    stack.net.heal()
    return "healed"


def _kill_slot_primary(stack: Stack, ctx: dict) -> str:
    """The link between the primary holding the sale's slot and its replica drops every
    packet for 2 s while the sale goes on — the primary keeps answering, asynchronous
    replication falls behind (its stream waits in the primary's retransmission queue) —
    then the primary is SIGKILLed and the link healed: the replica is promoted without the
    writes it missed. (A SIGSTOPped replica would not do: the kernel keeps receiving its
    stream for it.)"""
    key = f"seckill:{{a{ctx['activity']}}}:stock"
    host = stack.cluster_primary_of(key)
    info = stack.redis_probe(host, timeout=2).info("replication")
    replica_address = info["slave0"]["ip"] if isinstance(info.get("slave0"), dict) else ""
    replica = next((h for h in CLUSTER if stack.addr(h) == replica_address), "")
    ctx["killed"] = host
    lag = 0.0
    if replica:
        stack.net.cut(host, [replica])
        stack.net.cut(replica, [host])
        paused, ctx["cut_from"] = time.monotonic(), time.time()
        wait_until(lambda: time.monotonic() - paused >= 2.0, timeout=5, what="the replica to fall behind")
        lag = round(time.monotonic() - paused, 2)
    stack.procs[host].kill()
    ctx["cut_to"] = time.time()
    stack.net.heal()
    started = time.monotonic()
    wait_until(lambda: stack.cluster_primary_of(key) != host, timeout=60, what="a replica promoted")
    ctx["failover_s"] = round(time.monotonic() - started, 2)
    promoted = stack.cluster_primary_of(key)
    return (
        f"{host}-{replica or 'its replica'} link dropped for {lag} s, then SIGKILL {host} (the sale's primary); "
        f"{promoted} promoted in {ctx['failover_s']} s"
    )


def _restart_killed(stack: Stack, ctx: dict) -> str:
    host = ctx["killed"]
    stack.start_redis(host, stack.procs[host].argv[0])
    wait_until(stack.cluster_ok, timeout=60, what="the cluster ok again")
    return f"{host} restarted from its append-only file, rejoined as a replica"


def _cut_worker_db(stack: Stack, ctx: dict) -> str:
    stack.net.cut("worker", ["postgres"])
    return "the worker's packets to postgres dropped"


def _restart_broker(stack: Stack, ctx: dict) -> str:
    stack.procs["broker"].kill()
    stack.start_redis("broker", stack.procs["broker"].argv[0])
    return "broker SIGKILLed and started again from its append-only file"


def _nothing(stack: Stack, ctx: dict) -> str:
    return ""


def _latency_5ms(stack: Stack, ctx: dict) -> str:
    return "see the two runs"


# What a failover to a replica that missed writes can leave: stock the replica still counts
# but the database sold (drift), reservations it lost or replays it cannot place.
FAILOVER_ANOMALIES = {"drift", "db_guard_failed", "replay_exhausted", "duplicate_reservation"}

DRILLS = {
    1: Drill(1, "partial partition: web-a loses the Redis Cluster for 10 s", 4.0, _partition_web_a, 10.0, _heal,
             note="web-a's breaker opens and sells the database reserve; web-b keeps selling through Redis"),
    2: Drill(2, "Redis primary failover: SIGKILL the primary of the activity's slot", 4.0, _kill_slot_primary, 8.0,
             _restart_killed, explained_anomalies=FAILOVER_ANOMALIES,
             lost_write_explained=True,
             note="writes the replica missed are lost; the identity check must notice and re-derive the stock"),
    3: Drill(3, "the worker cut from PostgreSQL for 20 s", 3.0, _cut_worker_db, 20.0, _heal),
    4: Drill(4, "the broker restarted", 4.0, _restart_broker, 0.0, _nothing),
    5: Drill(5, "web-a's clock 2 s ahead (a test-only offset)", 0.0, _nothing, 0.0, _nothing, start_in=8.0,
             note="the sale starts 8 s after it is made; both flags are watched until they open"),
    6: Drill(6, "latency 5 ms each way against 0.25 ms", 0.0, _nothing, 0.0, _nothing),
}  # fmt: skip


# --- a sale ------------------------------------------------------------------------------


def make_sale(stack: Stack, sale: Sale, run: int, start_in: float = -5.0) -> tuple[int, str | None, list[list], float]:
    """An activity starting ``start_in`` seconds from now (live already by default) with its
    stock in the cluster, ``sale.shoppers`` shoppers with API tokens (the shared token
    cache filled, as before a big sale). Returns (id, purchase token or None before the
    start, [[user id, API token]], the start as a Unix time)."""
    from datetime import timedelta
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from inventory.models import Product
    from seckill.sale.activities import activity_create, activity_token_ensure
    from seckill.sale.lifecycle import activity_warmup

    User = get_user_model()
    prefix = f"d{run}-"
    users = User.objects.bulk_create([User(username=f"{prefix}{i}") for i in range(sale.shoppers)])
    users = list(User.objects.filter(username__startswith=prefix).order_by("pk"))
    Token.objects.bulk_create([Token(user=u, key=Token.generate_key()) for u in users])
    keys = dict(Token.objects.filter(user__in=users).values_list("user_id", "key"))
    now = timezone.now()
    product, _ = Product.objects.get_or_create(name="Drill phone", defaults={"list_price": Decimal("3999.00")})
    activity = activity_create(
        title=f"Drill {run}", product=product, seckill_price=Decimal("1.00"),
        start_at=now + timedelta(seconds=start_in), end_at=now + timedelta(hours=1), total_stock=sale.units,
    )  # fmt: skip
    activity_warmup(activity_id=activity.pk)
    token = activity_token_ensure(activity_id=activity.pk) if start_in < 0 else None
    call_command("token_cache_fill", stdout=open("/dev/null", "w"))
    return activity.pk, token, [[u.pk, keys[u.pk]] for u in users], activity.start_at.timestamp()


def flag_of(base: str, activity: int) -> dict:
    try:
        with urllib.request.urlopen(f"{base}/api/activities/{activity}/flag", timeout=5) as response:  # noqa: S310
            return json.loads(response.read())
    except OSError:
        return {}


def watch_the_start(stack: Stack, activity: int, start_at: float) -> tuple[str, dict[str, float]]:
    """Poll both web hosts' flags; return the purchase token as soon as either hands it out
    (the crowd buys at the first sign of the start), and go on watching in a thread until
    both say started: ``opened`` gets, per host, how many seconds before the real start
    (this machine's clock) it said so."""
    opened: dict[str, float] = {}
    token = ""

    def poll() -> bool:
        nonlocal token
        for host, base in zip(("web-a", "web-b"), stack.web_urls(), strict=True):
            if host in opened:
                continue
            flag = flag_of(base, activity)
            if flag.get("started"):
                opened[host] = round(start_at - time.time(), 2)
            if flag.get("token") and not token:
                token = flag["token"]
                opened[f"token from {host}"] = round(start_at - time.time(), 2)
        return "web-a" in opened and "web-b" in opened

    deadline = start_at - time.time() + 30
    wait_until(lambda: poll() or token, timeout=deadline, what="a web host to open the sale", interval=0.02)
    watcher = threading.Thread(target=wait_until, args=(poll,), kwargs={"timeout": deadline, "what": "both open"})
    watcher.daemon = True
    watcher.start()
    return token, opened


def redis_calls(stack: Stack) -> dict[str, int]:
    """Every command each Redis of the drill has run (INFO commandstats), by role: the
    stock cluster's primaries (replication to the replicas is not a round trip of ours),
    the cache, the broker. A restarted node starts again from 0."""
    import redis

    totals = {"cluster": 0, "cache": 0, "broker": 0}
    for host in ("cache", "broker", *CLUSTER):
        try:
            client = stack.redis_probe(host, timeout=2)
            if host in CLUSTER and client.info("replication").get("role") != "master":
                continue
            stats = client.info("commandstats")
        except redis.RedisError:
            continue
        totals["cluster" if host in CLUSTER else host] += sum(
            v["calls"] for k, v in stats.items() if k.startswith("cmdstat_")
        )
    return totals


def pg_counts() -> tuple[int, int]:
    """(statements run, transactions committed) in the drill's database so far."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements")
        statements = int(c.fetchone()[0])
        c.execute("SELECT pg_stat_clear_snapshot()")
        c.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        commits = int(c.fetchone()[0])
    return statements, commits


def result_of(base: str, activity: int, key: str) -> dict:
    request = urllib.request.Request(  # noqa: S310 (http to a drill host)
        f"{base}/api/activities/{activity}/result", headers={"Authorization": f"Token {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return {"code": f"http {exc.code}"}
    except OSError as exc:
        return {"code": f"error {exc}"}


class Supervisor:
    """Restarts the worker and beat when they exit, as systemd's Restart=always does."""

    def __init__(self, stack: Stack, log):
        self.stack, self.log, self.restarts = stack, log, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for name, start in (("worker", self.stack.start_worker), ("beat", self.stack.start_beat)):
                proc = self.stack.procs.get(name)
                if proc is not None and not proc.alive():
                    self.restarts += 1
                    self.log(f"supervisor: {name} exited, starting it again")
                    try:
                        start()
                    except Exception as exc:  # tried again on the next round
                        self.log(f"supervisor: {name} did not start: {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def run_drill(stack: Stack, drill: Drill, sale: Sale, run: int, log, *, label: str = "") -> Outcome:
    from seckill.sale.reconciliation import reconcile

    label = label or f"drill {drill.number}"
    activity, token, shoppers, start_at = make_sale(stack, sale, run, start_in=drill.start_in)
    ctx: dict = {"activity": activity}
    if token is None:
        token, opened = watch_the_start(stack, activity, start_at)
        ctx["opened_s_before_start"] = opened
    spec = {
        "activity": activity, "token": token, "webs": stack.web_urls(), "shoppers": shoppers,
        "trickle": sale.trickle, "trickle_seconds": sale.trickle_seconds, "threads": 32, "retries": 3,
    }  # fmt: skip
    spec_path, history = stack.run_dir / f"spec-{run}.json", stack.run_dir / f"history-{run}.jsonl"
    spec_path.write_text(json.dumps(spec))
    calls_before, (stmts_before, commits_before) = redis_calls(stack), pg_counts()
    log(f"{label}: activity {activity}, {sale.shoppers} shoppers, {sale.units} units — {drill.title}")
    argv = [str(BIN / "python"), "-m", "devtools.drill.load", str(spec_path), str(history)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    load = Proc(f"load-{run}", stack.net["client"].ns, argv, env, stack.run_dir)
    started = time.monotonic()
    load.start()
    notes = []
    if drill.fault is not _nothing:
        wait_until(lambda: time.monotonic() - started >= drill.fault_at or not load.alive(), timeout=drill.fault_at + 5,
                   what="the fault's time", interval=0.05)  # fmt: skip
        notes.append(f"t+{time.monotonic() - started:.1f}s fault: {drill.fault(stack, ctx)}")
        log(f"  {notes[-1]}")
        fault_at = time.monotonic()
        wait_until(lambda: time.monotonic() - fault_at >= drill.repair_after, timeout=drill.repair_after + 5,
                   what="the repair's time", interval=0.05)  # fmt: skip
        if drill.repair is not _nothing:
            notes.append(f"t+{time.monotonic() - started:.1f}s repair: {drill.repair(stack, ctx)}")
            log(f"  {notes[-1]}")
    wait_until(lambda: not load.alive(), timeout=600, what="the load to finish", interval=0.2)
    load_done = time.monotonic()
    log(f"  load done in {load_done - started:.1f} s; settling")
    from orders.models import Order

    accepted = len({r["shopper"] for r in read_history(history)[0] if r["status"] == 202})
    try:  # the round trips are counted once the orders exist, before the checker's own queries
        wait_until(lambda: Order.objects.filter(activity_id=activity).count() >= accepted, timeout=60,
                   what="the orders", interval=0.5)  # fmt: skip
    except TimeoutError:
        pass
    calls_after, (stmts_after, commits_after) = redis_calls(stack), pg_counts()

    def settled():
        try:
            r = reconcile(activity_id=activity, dry_run=True)
        except Exception:
            return False
        return r["identity_ok"] and r["reserved_not_ordered"] == 0 and r

    try:
        wait_until(settled, timeout=180, what="orders drained and the identities holding", interval=1.0)
    except TimeoutError as exc:
        notes.append(f"not settled: {exc}")
    settle_s = time.monotonic() - load_done
    report = json.loads(stack.manage("reconcile", str(activity), "--json"))

    records, _ = read_history(history)
    ordered = set(Order.objects.filter(activity_id=activity).values_list("user_id", flat=True))
    keys = dict(shoppers)
    web = stack.web_urls()[1]
    results = {
        s: result_of(web, activity, keys[s]) for s in {r["shopper"] for r in records if r["status"] == 202} - ordered
    }
    identity_events = [
        line for name in ("worker", "beat") for line in stack.procs[name].log().splitlines()
        if "seckill.redis_identity" in line and f"activity={activity}" in line
    ]  # fmt: skip
    outcome = check(
        label, activity, history, report, results, start_at=start_at,
        explained_anomalies=drill.explained_anomalies, lost_write_explained=drill.lost_write_explained,
        identity_events=identity_events,
    )  # fmt: skip
    purchases = max(outcome.figures["purchases_202"], 1)
    outcome.figures.update(
        {
            "settle_s": round(settle_s, 1),
            "redis_commands_per_request": {
                role: round((calls_after[role] - calls_before[role]) / max(len(records), 1), 2) for role in calls_after
            },
            "redis_commands_per_202": {
                role: round((calls_after[role] - calls_before[role]) / purchases, 2) for role in calls_after
            },
            "pg_statements_per_202": round((stmts_after - stmts_before) / purchases, 2),
            "pg_commits_per_202": round((commits_after - commits_before) / purchases, 2),
            "notes": notes
            + ([drill.note] if drill.note else [])
            + [f"identity check: {e[-200:]}" for e in identity_events[:2]],
            **({"failover_s": ctx["failover_s"]} if "failover_s" in ctx else {}),
            **(
                {
                    "202_while_the_replica_was_cut_off": sum(
                        1 for r in records if r["status"] == 202 and ctx["cut_from"] <= r["answered"] <= ctx["cut_to"]
                    )
                }
                if "cut_from" in ctx
                else {}
            ),
            **({"opened_s_before_start": ctx["opened_s_before_start"]} if "opened_s_before_start" in ctx else {}),
        }
    )
    return outcome
