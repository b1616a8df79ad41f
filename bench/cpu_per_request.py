"""CPU per answer of the app server's own Python, in one process, without a network, nginx or
a load generator: the ASGI application gunicorn's uvicorn workers serve (``server.app``, what
``config.asgi`` exposes) is called directly with each request's scope and body, one request
at a time on an event loop — the refusals that are the same for everyone answered on the
loop, a purchase on the pool's thread, everything else through Django — so the figures are
what a web worker spends besides parsing HTTP and its sockets.

    .venv/bin/python -m bench.cpu_per_request                        # table
    .venv/bin/python -m bench.cpu_per_request --profile purchase     # + cProfile top functions

CPU is this process's (``time.process_time``: every thread, the pool's included). With
``--profile`` the pool's work runs on the loop's thread instead (cProfile sees one thread),
for that scenario only, with Django's async-safety check off (``DJANGO_ALLOW_ASYNC_UNSAFE``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import sys
import time
from concurrent.futures import Executor, Future


def scope(method: str, path: str, *, token: str | None = None, body: bytes = b"") -> dict:
    """An HTTP request as uvicorn hands it to the application (from 127.0.0.1, plain HTTP)."""
    headers = [(b"host", b"127.0.0.1:8000")]
    if token:
        headers.append((b"authorization", f"Token {token}".encode()))
    if body:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def call(app, request: tuple[dict, bytes]) -> int:
    """One request through the application; its status. The client stays until the answer
    is complete, then is gone (``http.disconnect``), as a server tells the application."""
    request_scope, body = request
    answered = asyncio.Event()
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    status: list[int] = []

    async def receive() -> dict:
        if pending:
            return pending.pop()
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            answered.set()

    await app(request_scope, receive, send)
    return status[0]


class InlineExecutor(Executor):
    """Runs what is submitted at once on the caller's thread (for cProfile, which sees one)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting coroutine, as a pool would
            future.set_exception(exc)
        return future


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_per_request", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--profile", default="", help="cProfile this scenario (ping, ping_api, purchase, soldout, …)")
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--worker", action="store_true", help="run a Celery worker meanwhile (orders drain)")
    parser.add_argument("--cold-tokens", action="store_true", help="skip token_cache_fill: tokens from PostgreSQL")
    args = parser.parse_args(argv)
    if args.profile:
        # The pool's work on the loop's thread: Django would refuse its database calls there.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

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
            from seckill.purchase.token_cache import token_shared_fill

            token_shared_fill()  # the pre-sale step (manage.py token_cache_fill)
        tokens = tokens_file.read_text().split()
        from server.app import get_application

        app = get_application()  # what config.asgi serves
        pool = app.pool
        big = activity_new(title="cpu purchase", stock=10_000_000)
        small = activity_new(title="cpu sold out", stock=1)
        unknown_id = big.pk + 1_000_000

        def purchase(activity_id: int, purchase_token: str, token: str) -> tuple[dict, bytes]:
            payload = json.dumps({"token": purchase_token, "quantity": 1}).encode()
            return scope("POST", f"/api/activities/{activity_id}/purchase", token=token, body=payload), payload

        loop = asyncio.new_event_loop()
        loop.run_until_complete(call(app, purchase(small.pk, small.purchase_token, tokens[-1])))  # sells it out
        scenarios = {
            "ping": lambda i: (scope("GET", "/api/ping"), b""),  # the full middleware chain
            "ping_api": lambda i: (scope("GET", "/api/ping", token=tokens[i % 200]), b""),  # the API chain
            "purchase": lambda i: purchase(big.pk, big.purchase_token, tokens[i]),  # a new shopper each time
            # Sold-out shoppers retry (the bench's 2,000 do): their tokens are known by now.
            "soldout": lambda i: purchase(small.pk, small.purchase_token, tokens[n + i % 200]),
            "unknown": lambda i: purchase(unknown_id, small.purchase_token, tokens[n + i % 200]),
        }
        rows = {}
        for name, make in scenarios.items():
            for i in range(50):  # warm the code paths (first-request imports)
                loop.run_until_complete(call(app, scenarios["ping"](i)))
            requests = [make(i) for i in range(n)]
            profiler = cProfile.Profile() if name == args.profile else None
            app.pool = InlineExecutor() if profiler else pool
            statuses: dict[int, int] = {}

            async def run_all(requests=requests, statuses=statuses) -> None:
                for request in requests:
                    code = await call(app, request)
                    statuses[code] = statuses.get(code, 0) + 1

            started_cpu = time.process_time()
            if profiler:
                profiler.enable()
            loop.run_until_complete(run_all())
            if profiler:
                profiler.disable()
            rows[name] = (1000 * (time.process_time() - started_cpu) / n, statuses)
            if profiler:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
                out2 = io.StringIO()
                pstats.Stats(profiler, stream=out2).sort_stats("tottime").print_stats(args.top)
                print(out.getvalue(), out2.getvalue())
        app.pool = pool
        loop.close()
        ping_ms = rows["ping"][0]
        print(f"{'answer':10} {'CPU ms/req':>10} {'ping/this':>10}  statuses")
        for name, (ms, statuses) in rows.items():
            print(f"{name:10} {ms:10.3f} {ping_ms / ms:10.2f}  {statuses}")
        if worker is not None:
            worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
