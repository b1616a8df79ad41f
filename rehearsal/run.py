"""`make rehearse`: a sale rehearsal on this machine.

    make rehearse REHEARSE_ARGS="--shoppers 10000 --units 500 --admission room"

Starts the shop as make run does (or uses a running one: --url), makes the rehearsal's sale
and shoppers with the app's own command (rehearsal_setup), runs Locust headless (or with its
web UI: --web) with rehearsal/locustfile.py, and ends with the report and the verdict; the
exit status is Locust's: 1 when the verdict is red. --clean removes every rehearsal's data.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from rehearsal import stack as shop_stack

BASE_DIR = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")


def options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="make rehearse", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--shoppers", type=int, default=1000)
    p.add_argument("--units", type=int, default=100)
    p.add_argument("--admission", choices=["direct", "room"], default="direct")
    p.add_argument("--lead", type=int, default=30, help="seconds of arrivals before the start (the ramp)")
    p.add_argument("--arrival", default="0.3,0.6,0.1", help="shares arriving before, at and after the start")
    p.add_argument("--spike-seconds", type=float, default=3.0)
    p.add_argument("--tail-seconds", type=float, default=20.0)
    p.add_argument("--settle-seconds", type=float, default=90.0, help="after the last arrival (deadlines)")
    p.add_argument("--mix", default="0.8,0.1,0.1", help="winners who pay, cancel, let the order expire")
    p.add_argument("--pay-timeout", type=int, default=60)
    p.add_argument("--room-rate", type=int, default=100)
    p.add_argument("--room-cap", type=int, default=300)
    p.add_argument("--p99-target", type=float, default=500.0, help="ms; the capacity is the rate under it")
    p.add_argument("--url", default="", help="a shop already running on this machine (its database is this one)")
    p.add_argument("--out", default=str(BASE_DIR / ".local" / "rehearsal-report"))
    p.add_argument("--web", action="store_true", help="Locust's web UI instead of headless")
    p.add_argument("--clean", action="store_true", help="remove every rehearsal's sale, orders and shoppers, then stop")
    p.add_argument(
        "--no-worker", action="store_true", help="a broken setting: no Celery worker (the verdict turns red)"
    )
    return p.parse_args(argv)


def setup_args(o: argparse.Namespace, tokens: Path, start_in: int) -> list[str]:
    return [
        "rehearsal_setup",
        f"--shoppers={o.shoppers}",
        f"--units={o.units}",
        f"--start-in={start_in}",
        f"--admission={o.admission}",
        f"--pay-timeout={o.pay_timeout}",
        f"--room-rate={o.room_rate}",
        f"--room-cap={o.room_cap}",
        f"--tokens-file={tokens}",
    ]


def locust_argv(o: argparse.Namespace, *, base: str, setup: dict, out: Path) -> list[str]:
    argv = [
        LOCUST,
        "-f",
        str(BASE_DIR / "rehearsal" / "locustfile.py"),
        "--host",
        base,
        f"--activity={setup['activity']}",
        f"--tokens={setup['tokens_file']}",
        f"--arrival={o.arrival}",
        f"--spike-seconds={o.spike_seconds}",
        f"--tail-seconds={o.tail_seconds}",
        f"--settle-seconds={o.settle_seconds}",
        f"--mix={o.mix}",
        f"--p99-target={o.p99_target}",
        f"--out={out}",
        "--source-addresses",
        "--loglevel=WARNING",
    ]
    return [*argv, "--web-host=127.0.0.1"] if o.web else [*argv, "--headless", "--only-summary"]


def main(argv: list[str]) -> int:
    o = options(argv)
    out = Path(o.out)
    out.mkdir(parents=True, exist_ok=True)
    env, started = shop_stack.environment({"PYTHONUNBUFFERED": "1"})
    if o.clean:
        print(f"[rehearsal] removed {shop_stack.manage(env, 'rehearsal_clean').strip()}")
        shop_stack.embedded.stop_services(started)
        return 0
    stack = None
    try:
        if o.url:
            base = o.url.rstrip("/")
        else:
            print("[rehearsal] starting the shop as make run does…", flush=True)
            stack = shop_stack.start(env, logs=out / "logs", started_services=started)
            if o.no_worker:
                worker = stack.children.pop("worker")
                worker.terminate()
                worker.wait()
            base = stack.base
        print(f"[rehearsal] making the sale and {o.shoppers} shoppers…", flush=True)
        began = time.monotonic()
        # The start: the ramp's length after Locust starts (the set-up's own time added).
        setup = json.loads(shop_stack.manage(env, *setup_args(o, out / "tokens.txt", o.lead + 15)).splitlines()[-1])
        print(
            f"[rehearsal] sale {setup['activity']} ready in {time.monotonic() - began:.0f} s; Locust starts", flush=True
        )
        locust_env = dict(
            env, REHEARSAL_ADMIN=setup["admin"], REHEARSAL_ADMIN_PASSWORD=setup["password"], PYTHONUNBUFFERED="1"
        )
        return subprocess.run(locust_argv(o, base=base, setup=setup, out=out), cwd=BASE_DIR, env=locust_env).returncode
    finally:
        if stack is not None:
            stack.stop()
        elif started:
            shop_stack.embedded.stop_services(started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
