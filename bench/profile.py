"""Profile the web tier under load: py-spy samples every gunicorn worker while wrk runs
one scenario; prints where the time goes (inclusive and own time per function).

    .venv/bin/python -m bench.profile --scenario purchase --seconds 10
    .venv/bin/python -m bench.profile --scenario soldout --flame /tmp/soldout.svg
    .venv/bin/python -m bench.profile --scenario join --shoppers 40000   # the waiting room's joins

Needs ptrace (root, or CAP_SYS_PTRACE), as py-spy does.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def summarise(raw: Path, top: int) -> str:
    """Collapsed stacks → share of samples per function, inclusive and own."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue  # py-spy now and then writes a garbled line for a frame it could not read
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    out = [f"{total} samples", "", "inclusive %  function"]
    out += [f"{100 * n / total:10.1f}  {f}" for f, n in inclusive.most_common(top)]
    out += ["", "own %       function"]
    out += [f"{100 * n / total:10.1f}  {f}" for f, n in own.most_common(top)]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--scenario", choices=["ping", "purchase", "soldout", "join"], default="purchase")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--shoppers", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--cold-tokens", action="store_true", help="tokens in PostgreSQL only (as make bench's uncached purchases)"
    )
    parser.add_argument(
        "--gil", action="store_true", help="sample only the thread holding the GIL: where the CPU goes, not the waits"
    )
    parser.add_argument("--flame", default="", help="also write a flame graph SVG here")
    parser.add_argument(
        "--target", choices=["web", "worker"], default="web", help="sample gunicorn (default) or the Celery worker"
    )
    args = parser.parse_args(argv)

    from . import stack

    env, started_servers = stack.bench_environment()
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    children = []
    try:
        stack.manage(env, "migrate", "--noinput", "-v", "0")
        import django

        django.setup()
        from .data import activity_new, shoppers_create
        from .wrkrun import wrk_run

        port = stack.free_port()
        # Every joiner comes from 127.0.0.1: the room's per-address limit off, as make bench has it.
        web = stack.gunicorn_start(env, work, port, SECKILL_ROOM_JOINS_PER_IP="off")
        children.append(web)
        worker = stack.worker_start(env, work, 2)
        children.append(worker)
        tokens = work / "tokens.txt"
        shoppers_create(args.shoppers, tokens)
        from seckill.purchase.token_cache import token_shared_fill, token_shared_forget

        token_shared_fill()  # the pre-sale step, as make bench does
        if args.cold_tokens:  # still in the token filter, as every real token is
            token_shared_forget(tokens.read_text().split())
        if args.scenario == "ping":
            kwargs = {"method": "GET", "path": "/api/ping"}
        elif args.scenario == "join":  # as make bench's room scenario: new places, tokens in rotation
            activity = activity_new(
                title="profile room", stock=10_000_000, admission_mode="room", room_rate=1000, room_cap=0
            )
            kwargs = {"method": "POST", "path": f"/api/activities/{activity.pk}/room/join", "tokens_file": tokens}
        else:
            activity = activity_new(title="profile", stock=100 if args.scenario == "soldout" else 10_000_000)
            body = json.dumps({"token": activity.purchase_token, "quantity": 1})
            kwargs = {"method": "POST", "path": f"/api/activities/{activity.pk}/purchase", "body": body}
            kwargs["tokens_file"] = tokens
            if args.scenario == "soldout":
                wrk_run(base=f"http://127.0.0.1:{port}", connections=50, seconds=2, **kwargs)
                lines = tokens.read_text().splitlines()[:2000]
                kwargs["tokens_file"] = work / "few.txt"
                kwargs["tokens_file"].write_text("".join(f"{t}\n" for t in lines))
        raw = work / "profile.txt"
        record = [
            str(BIN / "py-spy"),
            "record",
            "--pid",
            str((web if args.target == "web" else worker).proc.pid),
            "--subprocesses",
            "--rate",
            "200",
            "--duration",
            str(int(args.seconds)),
            "--format",
            "raw",
            "--output",
            str(raw),
            "--nonblocking",
            *(["--gil"] if args.gil else []),
        ]
        spy = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        result_box = {}
        t = threading.Thread(
            target=lambda: result_box.setdefault(
                "r",
                wrk_run(
                    base=f"http://127.0.0.1:{port}",
                    connections=args.connections,
                    seconds=args.seconds,
                    label=f"profiling {args.scenario}",
                    **kwargs,
                ),
            )
        )
        t.start()
        t.join()
        spy.wait(60)
        result = result_box["r"]
        print(f"{args.scenario}: {result.rps:.1f} RPS, p99 {result.latency_us['p99'] / 1000:.1f} ms, {result.statuses}")
        print(summarise(raw, args.top))
        if args.flame:
            subprocess.run(
                [str(BIN / "py-spy"), "record", "--help"], capture_output=True
            )  # flame graphs: re-run py-spy with --format flamegraph (kept simple here)
        return 0
    finally:
        for child in reversed(children):
            child.stop()
        stack.embedded.stop_services(started_servers)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
