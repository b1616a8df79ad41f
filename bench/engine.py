"""The stock engine alone, without HTTP: the same multi-process client drives the Lua
purchase script, then the database path (order insert + conditional UPDATE in one
transaction), each for a fixed time; throughput is what all processes did together."""

from __future__ import annotations

import multiprocessing as mp
import time

from django import db

from seckill.sale.snapshot import activity_snapshot_load
from stock.keys import ActivityKeys
from stock.redis_client import reset_stock_redis, stock_redis
from stock.scripts import PURCHASE, ScriptCode, purchase_script_call, run_purchase

from .naive import naive_purchase


def _lua_client(activity_id: int, index: int, start: float, end: float, out, depth: int = 1) -> None:
    """depth 1: one script call per round trip, as a web request makes it; depth > 1:
    that many calls per round trip (a pipeline; each call still one atomic script), so
    that the Python client is not what is measured."""
    reset_stock_redis()  # a fresh connection in this process
    client, keys = stock_redis(), ActivityKeys(activity_id)
    user = 100_000_000 * (index + 1)  # ids no shopper has: the script does not care
    done = failed = 0
    while time.time() < start:
        time.sleep(0.001)
    while time.time() < end:
        if depth == 1:
            codes = [run_purchase(client, keys, user_id=user + done + failed, quantity=1, limit=1).code]
        else:
            pipe = client.pipeline(transaction=False)
            for j in range(depth):
                PURCHASE(
                    **purchase_script_call(keys, user_id=user + done + failed + j, quantity=1, limit=1), client=pipe
                )
            codes = [int(reply[0]) for reply in pipe.execute()]
        reserved = sum(1 for code in codes if code == ScriptCode.RESERVED)
        done, failed = done + reserved, failed + len(codes) - reserved
    out.put((done, failed, time.time()))


def _db_client(activity_id: int, user_ids: list[int], start: float, end: float, out) -> None:
    from core.errors import ApiError

    snapshot = activity_snapshot_load(activity_id)
    done = failed = 0
    while time.time() < start:
        time.sleep(0.001)
    for user_id in user_ids:
        if time.time() >= end:
            break
        try:
            naive_purchase(activity=snapshot, user_id=user_id, quantity=1)
            done += 1
        except ApiError:
            failed += 1
    db.connections.close_all()
    out.put((done, failed, time.time()))


def engine_run(
    *, kind: str, activity_id: int, processes: int, seconds: float, user_ids: list[int], depth: int = 1
) -> dict:
    """kind "lua" (``depth`` script calls per round trip) or "db"; returns ops, failures
    and ops per second."""
    db.connections.close_all()  # children must not share the parent's connection
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    start = time.time() + 1.0
    end = start + seconds
    procs = []
    for i in range(processes):
        if kind == "lua":
            args = (activity_id, i, start, end, out, depth)
            target = _lua_client
        else:
            args = (activity_id, user_ids[i::processes], start, end, out)
            target = _db_client
        procs.append(ctx.Process(target=target, args=args))
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(30)
    done = sum(r[0] for r in results)
    failed = sum(r[1] for r in results)
    # A database client may run out of shoppers before the end: count the time it ran.
    ran = max(min(r[2], end) for r in results) - start
    return {"ops": done, "failed": failed, "seconds": ran, "ops_per_s": done / ran, "processes": processes}
