"""CPU per request of each API answer, in one process, without a network or a load
generator: the WSGI handler is called directly, so the figures are the web tier's own
Python cost (what a gunicorn worker spends besides accepting and closing the socket).

    .venv/bin/python -m bench.cpu_per_request                 # table
    .venv/bin/python -m bench.cpu_per_request --profile purchase   # + cProfile top functions
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time


def environ(method: str, path: str, *, token: str | None = None, body: bytes = b"") -> dict:
    env = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json" if body else "",
    }
    if token:
        env["HTTP_AUTHORIZATION"] = f"Token {token}"
    return env


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_per_request")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--profile", default="", help="cProfile this scenario (ping, purchase, soldout)")
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--worker", action="store_true", help="run a Celery worker meanwhile (orders drain)")
    parser.add_argument("--cold-tokens", action="store_true", help="skip token_cache_fill: tokens from PostgreSQL")
    args = parser.parse_args(argv)

    from . import stack

    with stack.bench_django() as bench_env:
        from .data import activity_new, shoppers_create
        from .stack import BASE_DIR

        worker = None
        if args.worker:
            import tempfile
            from pathlib import Path

            worker = stack.worker_start(bench_env, Path(tempfile.mkdtemp(prefix="cpu-worker-")), 2)
        n = args.requests
        tokens_file = BASE_DIR / ".local" / "cpu-tokens.txt"
        shoppers_create(2 * n, tokens_file)
        if not args.cold_tokens:
            from seckill.authentication import token_shared_fill

            token_shared_fill()  # the pre-sale step (manage.py token_cache_fill)
        tokens = tokens_file.read_text().split()
        try:
            from server.handlers import StackDispatcher

            app = StackDispatcher()  # the stacks behind what gunicorn serves (server/handlers.py)
        except ImportError:  # an older checkout, measured for a before/after
            from django.core.handlers.wsgi import WSGIHandler

            app = WSGIHandler()
        big = activity_new(title="cpu purchase", stock=10_000_000)
        small = activity_new(title="cpu sold out", stock=1)

        def call(env: dict) -> int:
            status = []
            body = app(env, lambda s, h, *a: status.append(s))
            b"".join(body)
            getattr(body, "close", lambda: None)()
            return int(status[0].split()[0])

        def purchase_env(activity, token):
            payload = json.dumps({"token": activity.purchase_token, "quantity": 1}).encode()
            return environ("POST", f"/api/activities/{activity.pk}/purchase", token=token, body=payload)

        call(purchase_env(small, tokens[-1]))  # sells it out
        scenarios = {
            "ping": lambda i: environ("GET", "/api/ping"),
            "ping_api": lambda i: environ("GET", "/api/ping", token=tokens[i % 200]),  # the API chain
            "purchase": lambda i: purchase_env(big, tokens[i]),  # a new shopper each time
            # Sold-out shoppers retry (the bench's 2,000 do): their tokens are known by now.
            "soldout": lambda i: purchase_env(small, tokens[n + i % 200]),
        }
        rows = {}
        for name, make in scenarios.items():
            for i in range(50):  # warm the code paths (first-request imports)
                call(scenarios["ping"](i))
            envs = [make(i) for i in range(n)]
            profiler = cProfile.Profile() if name == args.profile else None
            statuses: dict[int, int] = {}
            started_cpu = time.process_time()
            if profiler:
                profiler.enable()
            for e in envs:
                code = call(e)
                statuses[code] = statuses.get(code, 0) + 1
            if profiler:
                profiler.disable()
            rows[name] = (1000 * (time.process_time() - started_cpu) / n, statuses)
            if profiler:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
                out2 = io.StringIO()
                pstats.Stats(profiler, stream=out2).sort_stats("tottime").print_stats(args.top)
                print(out.getvalue(), out2.getvalue())
        ping_ms = rows["ping"][0]
        print(f"{'answer':10} {'CPU ms/req':>10} {'ping/this':>10}  statuses")
        for name, (ms, statuses) in rows.items():
            print(f"{name:10} {ms:10.3f} {ping_ms / ms:10.2f}  {statuses}")
        if worker is not None:
            worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
