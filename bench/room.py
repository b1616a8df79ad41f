"""The waiting room's bench: joins per second and status polls per second on the project's
server behind nginx, against the plain-Django yardstick behind the same nginx configuration
(bench/yardstick.py), in one run. `make bench` measures the same (its "room" scenario,
``measure_room``); this runs it alone.

    .venv/bin/python -m bench.room [--shoppers 20000] [--seconds 5] [--connections 50] [--json out.json]

The project's gunicorn (gunicorn.conf.py, production settings, embedded PostgreSQL and Redis
unless DATABASE_URL / REDIS_URL are set, the bench's own database) behind nginx
(deploy/nginx/shop.conf) serves one live waiting-room sale. Measured with the bench's wrk
script (bench/wrk/rotate.lua):

- ``join (new place)``: shoppers' tokens in rotation, each used at most once (the run makes
  fewer joins than there are shoppers; the room's placed count is checked against the 200s);
- ``join again``: those who joined, in rotation, each answered their place again;
- ``status poll``: GET of the room's status (the same for everyone, public for a second:
  nginx keeps it for its second, the app's processes 0.5 s each);

then the yardstick's three servers, each measured alone, and the ratio of each room figure
to the best of them. The table goes to stdout; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from . import stack
from .wrkrun import wrk_run
from .yardstick import figures, yardstick_best, yardstick_measure


def _say(message: str) -> None:
    sys.stderr.write(f"[bench] {message}\n")
    sys.stderr.flush()


def measure_room(
    *, base: str, activity_id: int, tokens: Path, shoppers: int, seconds: float, connections: int, pids
) -> dict:
    """Joins of shoppers new to the room (tokens in rotation, each used at most once while
    fewer joins than shoppers are made), joins again of those who joined, status polls."""
    from rest_framework.authtoken.models import Token

    from stock.keys import ActivityKeys
    from stock.redis_client import stock_redis

    room = f"/api/activities/{activity_id}/room"
    out = {}
    joins = wrk_run(
        base=base,
        method="POST",
        path=f"{room}/join",
        connections=connections,
        seconds=seconds,
        tokens_file=tokens,
        label="join (new place)",
        server_pids=pids,
    )
    joined = [int(u) for u in stock_redis().hkeys(ActivityKeys(activity_id).room_places)]
    row = figures(joins, {"200"})
    # Every join a new place while the rotation has not come round (fewer placed than shoppers;
    # a few joins in flight when wrk stops are placed but not counted).
    out["join (new place)"] = dict(row, placed=len(joined), all_new=len(joined) < shoppers)
    if len(joined) >= shoppers:
        _say(f"every one of the {shoppers} shoppers joined: some joins were not new (use more --shoppers)")
    again_tokens = tokens.with_name("joined.txt")
    again_tokens.write_text(
        "".join(f"{k}\n" for k in Token.objects.filter(user_id__in=joined).values_list("key", flat=True))
    )
    again = wrk_run(
        base=base,
        method="POST",
        path=f"{room}/join",
        connections=connections,
        seconds=seconds,
        tokens_file=again_tokens,
        label="join again",
        server_pids=pids,
    )
    out["join again"] = figures(again, {"200"})
    # The status as a sale's crowd finds it: polled already, so in nginx's cache. Its first
    # request fills the entry; requests that come meanwhile wait for it (proxy_cache_lock),
    # nginx looking again every 500 ms, and wrk's latency correction would spread those
    # waits over the whole run. Once filled, an expired entry is served while it is renewed.
    with urllib.request.urlopen(base + room, timeout=10) as reply:
        reply.read()
    polls = wrk_run(
        base=base,
        method="GET",
        path=room,
        connections=connections,
        seconds=seconds,
        label="status poll",
        server_pids=pids,
    )
    out["status poll"] = figures(polls, {"200"})
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shoppers", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    _say("starting the embedded servers (if needed) and a fresh bench database…")
    env, started = stack.bench_environment()
    os.environ.update(env)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-room-"))
    web = front = None
    try:
        stack.manage(env, "migrate", "--noinput", "-v", "0")
        import django

        django.setup()
        from seckill.purchase.token_cache import token_shared_fill

        from .data import activity_new, shoppers_create

        tokens = log_dir / "tokens.txt"
        shoppers_create(args.shoppers, tokens)
        token_shared_fill()
        activity = activity_new(
            title="Room bench",
            stock=1_000_000,
            admission_mode="room",
            room_rate=1000,
            room_cap=0,
        )
        port = stack.free_port()
        # Every join comes from 127.0.0.1: no per-address cap.
        web = stack.gunicorn_start(env, log_dir, port, SECKILL_ROOM_JOINS_PER_IP="off")
        front = stack.front_start(f"127.0.0.1:{port}", log_dir)
        base = front.base
        _say(f"up: nginx on {base} in front of gunicorn on 127.0.0.1:{port}; {args.shoppers} shoppers; logs: {log_dir}")
        started_at = time.monotonic()
        room = measure_room(
            base=base,
            activity_id=activity.pk,
            tokens=tokens,
            shoppers=args.shoppers,
            seconds=args.seconds,
            connections=args.connections,
            pids=web.pids(),
        )
        front.stop()
        web.stop()
        web = front = None
        yard = yardstick_best(yardstick_measure(seconds=args.seconds, connections=[args.connections]))
        best = yard[args.connections]
        run_minutes = round((time.monotonic() - started_at) / 60, 1)
    finally:
        if front is not None:
            front.stop()
        if web is not None:
            web.stop()
        from devtools import embedded

        embedded.stop_services(started)

    print(f"waiting room, c={args.connections}, {args.shoppers} shoppers ({run_minutes} min)")
    print(f"{'':28} {'req/s':>8} {'p99 ms':>8} {'CPU ms/req':>10} {'vs yardstick':>12}")
    for name, row in room.items():
        ratio = row["rps"] / best["rps"] if best["rps"] else 0.0
        errors = f"  ({row['unexpected']} unexpected answers)" if row["unexpected"] else ""
        print(
            f"{name:28} {row['rps']:8.0f} {row['p99_ms']:8.1f} {row['web_cpu_ms_per_req']:10.3f} {ratio:11.2f}×{errors}"
        )
    label = f"yardstick: {best['server']}"
    print(f"{label:28.28} {best['rps']:8.0f} {best['p99_ms']:8.1f} {best['web_cpu_ms_per_req']:10.3f}")
    if args.json:
        args.json.write_text(json.dumps({"room": room, "yardstick": best, "args": vars(args)}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
