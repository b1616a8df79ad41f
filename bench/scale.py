"""Scale-out figures: the purchase script on a local three-master Redis Cluster (one hot
key, eight keys spread over the nodes, and one activity with sharded stock S = 8: claim
in a user partition + shard script + claim update per purchase), and the database path
used while Redis is down; each Redis node's CPU beside the throughput.

    .venv/bin/python -m bench.scale [--seconds 10] [--procs 4] [--db-threads 4]

Runs by itself: starts the embedded PostgreSQL (or uses DATABASE_URL), migrates, starts a
three-node Redis Cluster from Debian's redis-server on loopback ports, measures, stops it.
Load comes from --procs processes calling the Lua script directly (no HTTP), so the
figures are the stock engine's, not gunicorn's. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from devtools import embedded

    os.environ.update(embedded.ensure_services())
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)


def _node_cpu(ports: list[int]) -> dict[int, float]:
    import redis

    out = {}
    for port in ports:
        info = redis.Redis(port=port).info("cpu")
        out[port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return out


def _hammer(
    url: str, activity_ids: list[int], seconds: float, first_user: int, result: mp.Queue, shards: int = 1
) -> None:
    import random

    import redis

    from stock.layout import StockLayout
    from stock.scripts import ScriptCode

    client = redis.RedisCluster.from_url(url)
    layouts = [StockLayout(a, shards) for a in activity_ids]
    done = reserved = 0
    user = first_user
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        user += 1
        reply = random.choice(layouts).reserve(client, user_id=user, quantity=1, limit=1)
        done += 1
        reserved += reply.code == ScriptCode.RESERVED
    result.put((done, reserved))


def redis_scenario(cluster, *, name: str, activity_ids: list[int], seconds: float, procs: int, shards: int = 1) -> dict:
    import redis

    from stock.keys import ActivityKeys
    from stock.scripts import run_warmup

    client = redis.RedisCluster.from_url(cluster.url)
    stock_keys = [k for a in activity_ids for k in ActivityKeys(a).shards(shards)]
    for keys in stock_keys:
        run_warmup(client, keys, remaining=10**9, loaded=10**9, expected=None, log_length=0)
    nodes = {client.get_node_from_key(k.stock).port for k in stock_keys}
    ports = [n.port for n in cluster.nodes]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    workers = [
        ctx.Process(target=_hammer, args=(cluster.url, activity_ids, seconds, i * 10**8, queue, shards))
        for i in range(procs)
    ]
    cpu_before, started = _node_cpu(ports), time.perf_counter()
    for w in workers:
        w.start()
    totals = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    wall = time.perf_counter() - started
    cpu_after = _node_cpu(ports)
    cluster.flush()
    return {
        "scenario": name,
        "keys": len(stock_keys),
        "nodes_with_keys": len(nodes),
        "ops_per_s": sum(t[0] for t in totals) / wall,
        "reserved_per_s": sum(t[1] for t in totals) / wall,
        "node_cpu_pct": {p: round(100 * (cpu_after[p] - cpu_before[p]) / wall, 1) for p in ports},
    }


def db_scenario(*, seconds: float, threads: int) -> dict:
    from datetime import timedelta
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from inventory.models import Product
    from seckill.purchase.fallback import purchase_fallback
    from seckill.sale.activities import activity_create
    from seckill.sale.snapshot import activity_snapshot

    now = timezone.now()
    product = Product.objects.create(name="bench scale", list_price=Decimal("9.99"))
    activity = activity_create(
        title="bench scale db path",
        product=product,
        seckill_price=Decimal("0.10"),
        start_at=now - timedelta(seconds=1),
        end_at=now + timedelta(hours=1),
        total_stock=10**6,
        db_reserve=10**6,  # the database path sells only its reserve
    )
    User = get_user_model()
    tag = f"scale{int(time.time())}"
    User.objects.bulk_create([User(username=f"{tag}-{i}") for i in range(20000)], batch_size=2000)
    user_ids = list(User.objects.filter(username__startswith=f"{tag}-").values_list("pk", flat=True))
    # The real database path (the order insert and the conditional update of the reserve),
    # as a purchase takes it while Redis is away.
    snapshot = activity_snapshot(activity.pk)
    lock, counts = threading.Lock(), [0]
    deadline = time.perf_counter() + seconds

    def run():
        try:
            while time.perf_counter() < deadline:
                with lock:
                    if not user_ids:
                        return
                    user_id = user_ids.pop()
                purchase_fallback(activity=snapshot, user_id=user_id, quantity=1)
                with lock:
                    counts[0] += 1
        finally:
            connection.close()

    started = time.perf_counter()
    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - started
    return {"scenario": f"database path ({threads} threads)", "orders_per_s": counts[0] / wall}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--db-threads", type=int, default=4)
    args = parser.parse_args(argv)
    _setup_django()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.cluster.conftest import LocalCluster

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        cluster = LocalCluster(Path(tmp)).start()
        try:
            single = redis_scenario(
                cluster, name="one hot key (S=1)", activity_ids=[900001], seconds=args.seconds, procs=args.procs
            )
            spread = redis_scenario(
                cluster,
                name="8 keys over 3 nodes",
                activity_ids=list(range(900001, 900009)),
                seconds=args.seconds,
                procs=args.procs,
            )
            sharded = redis_scenario(
                cluster,
                name="one activity, S=8 shards",
                activity_ids=[900001],
                seconds=args.seconds,
                procs=args.procs,
                shards=8,
            )
        finally:
            cluster.stop()
    db = db_scenario(seconds=args.seconds, threads=args.db_threads)

    ports = sorted(single["node_cpu_pct"])
    print(f"\ncores: {os.cpu_count()}, load procs: {args.procs}, {args.seconds:.0f} s per scenario\n")
    # Purchases per CPU-second of Redis: the capacity of one node core, whatever the load
    # generator reached. S = 1: one script call per purchase; S = 8: three (claim, shard, claim update).
    print(
        "| scenario | purchases/s | "
        + " | ".join(f"node {i} CPU %" for i in range(len(ports)))
        + " | purchases per Redis CPU-s |"
    )
    print("|---|---:|" + "---:|" * len(ports) + "---:|")
    for row in (single, spread, sharded):
        cpu = " | ".join(str(row["node_cpu_pct"][p]) for p in ports)
        per_cpu = row["ops_per_s"] / max(sum(row["node_cpu_pct"].values()) / 100, 1e-9)
        print(f"| {row['scenario']} | {row['ops_per_s']:.0f} | {cpu} | {per_cpu:.0f} |")
    print(f"| {db['scenario']} | {db['orders_per_s']:.0f} orders/s | " + " | ".join("-" for _ in ports) + " | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
