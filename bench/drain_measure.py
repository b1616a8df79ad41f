"""CPU per order of the batched drain (reservations -> orders), in one process.

    .venv/bin/python -m bench.drain_measure                    # 10,000 reservations
    .venv/bin/python -m bench.drain_measure --reservations 2000 --profile

Starts (or reuses) the embedded PostgreSQL and Redis with the bench's own database and
Redis databases (bench.stack.bench_environment), makes N reservations through the real
purchase script, then runs ``seckill.services.reservations_drain`` here, as the drain
task does. Reports wall time, orders/s, and CPU per order: this process (Python) plus
the PostgreSQL and Redis server processes. CPU per order is the figure that survives a
busy machine; wall time does not. The invariants are checked afterwards.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_measure")
    parser.add_argument("--reservations", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the drain and print the top functions")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)

    from . import stack

    env, started = stack.bench_environment()
    os.environ.update(env)
    try:
        stack.manage(env, "migrate", "--noinput", "-v", "0")
        import django

        django.setup()
        from django.conf import settings
        from django.db import connection

        from orders.models import Order
        from seckill.keys import ActivityKeys
        from seckill.redis_client import stock_redis
        from seckill.scripts import ScriptCode, run_purchase
        from seckill.services import reservations_drain

        from .data import activity_new, shoppers_create
        from .invariants import invariants_check

        n = args.reservations
        user_ids = shoppers_create(n, stack.BASE_DIR / ".local" / "drain-tokens.txt")
        activity = activity_new(title="drain measure", stock=n)
        client, keys = stock_redis(), ActivityKeys(activity.pk)
        for user_id in user_ids:
            reply = run_purchase(client, keys, user_id=user_id, quantity=1, limit=1)
            if reply.code != ScriptCode.RESERVED:
                raise AssertionError(f"reservation for {user_id} failed: {reply}")
        connection.ensure_connection()  # its backend must be among the store's processes
        store = stack.store_pids()
        profiler = cProfile.Profile() if args.profile else None

        store_before, cpu_before, wall_before = stack.cpu_seconds(store), time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        outcome = reservations_drain(activity_id=activity.pk)
        if profiler:
            profiler.disable()
        wall = time.perf_counter() - wall_before
        python_cpu = time.process_time() - cpu_before
        store_cpu = stack.cpu_seconds(store) - store_before

        made = Order.objects.filter(activity_id=activity.pk).count()
        if outcome.created != n or made != n:
            raise AssertionError(f"the drain created {outcome.created} orders ({made} rows) of {n}")
        invariants_check(activity_id=activity.pk)  # raises when broken
        if profiler:
            for key in ("cumulative", "tottime"):
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(args.top)
                print(out.getvalue())
        print(f"batched drain, {n} reservations, {settings.SECKILL_ORDER_BATCH_SIZE} per transaction (invariants ok)")
        print(f"  wall            {wall:8.2f} s   ({n / wall:,.0f} orders/s)")
        print(f"  Python CPU      {1000 * python_cpu / n:8.3f} ms/order")
        print(f"  PG + Redis CPU  {1000 * store_cpu / n:8.3f} ms/order")
        print(f"  total CPU       {1000 * (python_cpu + store_cpu) / n:8.3f} ms/order")
        if profiler:
            print("  (under cProfile: the Python figure is inflated)")
    finally:
        from config import embedded

        embedded.stop_services(started)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
