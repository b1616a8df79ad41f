"""CPU per order of the batched drain (reservations -> orders), in one process.

    .venv/bin/python -m bench.drain_measure                    # 10,000 reservations, 3 rounds
    .venv/bin/python -m bench.drain_measure --reservations 2000 --rounds 1 --profile

Starts (or reuses) the embedded PostgreSQL and Redis with the bench's own database and
Redis databases (bench.stack.bench_environment). Each round makes N reservations on a
fresh activity through the real purchase script, then runs
``seckill.sale.replay.reservations_drain`` here, as the drain task does, and checks the
invariants. Reports wall time, orders/s, the CPU per order of this process (Python), of
the PostgreSQL and of the Redis server processes, and the SQL statements the drain sent
per transaction. CPU per order is the figure that survives a busy machine; wall time does
not. Quote the medians (of each column).

PostgreSQL's CPU is that of every process of the embedded server; on a server given by
DATABASE_URL (shared with others) it is that of this process's own backend only (no WAL
writer or checkpointer). Redis's is the whole server's either way (on a shared server it
includes the others' commands). ``SECKILL_ORDER_BATCH_SIZE=100`` measures another batch size.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import Counter


def _statement_kind(sql: str) -> str:
    """The first words of a statement, enough to tell the batch's statements apart."""
    words = sql.split()
    head = " ".join(words[:3]).upper()
    if head.startswith("WITH"):
        return "WITH (stock move + ledger)"
    if head.startswith("INSERT INTO"):
        return f"INSERT INTO {words[2]}"
    if head.startswith("SELECT"):
        table = next((w for k, w in enumerate(words[:-1]) if words[k - 1].upper() == "FROM"), "?")
        return f"SELECT FROM {table}"
    return " ".join(words[:2])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_measure")
    parser.add_argument("--reservations", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile the drains and print the top functions")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)

    from . import stack

    with stack.bench_django():
        from django.conf import settings
        from django.db import connection

        from orders.models import Order
        from seckill.sale.replay import reservations_drain
        from stock.keys import ActivityKeys
        from stock.redis_client import stock_redis
        from stock.scripts import ScriptCode, run_purchase

        from .data import activity_new, shoppers_create
        from .invariants import invariants_check

        n = args.reservations
        # The same shoppers buy in every round: each round has its own activity.
        tokens = stack.BASE_DIR / ".local" / "drain-tokens.txt"
        tokens.parent.mkdir(exist_ok=True)
        user_ids = shoppers_create(n, tokens)
        profiler = cProfile.Profile() if args.profile else None
        rounds = []
        statements: Counter[str] = Counter()
        transactions = 0

        def count(execute, sql, params, many, context):
            statements[_statement_kind(sql)] += 1
            return execute(sql, params, many, context)

        def count_commits(wrapped):
            def commit():
                nonlocal transactions
                transactions += 1
                return wrapped()

            return commit

        for _ in range(args.rounds):
            activity = activity_new(title="drain measure", stock=n)
            client, keys = stock_redis(), ActivityKeys(activity.pk)
            for user_id in user_ids:
                reply = run_purchase(client, keys, user_id=user_id, quantity=1, limit=1)
                if reply.code != ScriptCode.RESERVED:
                    raise AssertionError(f"reservation for {user_id} failed: {reply}")
            connection.ensure_connection()  # its backend must be among the store's processes
            postgres, redis_server = stack.postgres_pids(), stack.redis_pids()
            if not postgres:  # a server given by DATABASE_URL: this connection's backend
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    postgres = [cursor.fetchone()[0]]
            if not redis_server:
                redis_server = [int(client.info("server")["process_id"])]

            pg_before, redis_before = stack.cpu_seconds(postgres), stack.cpu_seconds(redis_server)
            cpu_before, wall_before = time.process_time(), time.perf_counter()
            if profiler:
                profiler.enable()
            connection._commit = count_commits(connection._commit)  # type: ignore[method-assign]
            try:
                with connection.execute_wrapper(count):
                    outcome = reservations_drain(activity_id=activity.pk)
            finally:
                del connection._commit
            if profiler:
                profiler.disable()
            wall = time.perf_counter() - wall_before
            python_cpu = time.process_time() - cpu_before
            pg_cpu = stack.cpu_seconds(postgres) - pg_before
            redis_cpu = stack.cpu_seconds(redis_server) - redis_before

            made = Order.objects.filter(activity_id=activity.pk).count()
            if outcome.created != n or made != n:
                raise AssertionError(f"the drain created {outcome.created} orders ({made} rows) of {n}")
            invariants_check(activity_id=activity.pk)  # raises when broken
            rounds.append((wall, *(1000 * cpu / n for cpu in (python_cpu, pg_cpu, redis_cpu))))
        if profiler:
            for key in ("cumulative", "tottime"):
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(args.top)
                print(out.getvalue())
        print(f"batched drain of {n} reservations, {settings.SECKILL_ORDER_BATCH_SIZE} per transaction, invariants ok")
        header = ("round", "wall s", "orders/s", "Python", "PostgreSQL", "Redis", "total CPU")
        print("{:>6} {:>7} {:>9} {:>10} {:>10} {:>10} {:>10}   (CPU in ms per order)".format(*header))
        median = tuple(statistics.median(r[k] for r in rounds) for k in range(4))
        for label, (wall, *cpu) in [*((str(i + 1), r) for i, r in enumerate(rounds)), ("median", median)]:
            print(f"{label:>6} {wall:7.2f} {n / wall:9,.0f}", *(f"{ms:10.3f}" for ms in cpu), f"{sum(cpu):10.3f}")
        per = max(transactions, 1)
        print(
            f"SQL per transaction: {sum(statements.values()) / per:.2f} statements + commit"
            f" ({transactions} transactions, {sum(statements.values())} statements)"
        )
        for kind, number in statements.most_common():
            print(f"  {number / per:6.2f}  {kind}")
        if profiler:
            print("(under cProfile: the Python figures are inflated)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
