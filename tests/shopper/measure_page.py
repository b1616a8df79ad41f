"""Time the activity page, its 304 and flag.js through Django's test client, in one process.

Run from the project root: PYTHONPATH=. .venv/bin/python tests/shopper/measure_page.py
(creates and drops its own test database; not while the test suite runs in this worktree).
"""

import gzip
import os
import statistics
import time
from pathlib import Path

import django

REQUESTS = 300


def timed(client, url: str, **headers) -> str:
    samples = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        client.get(url, **headers)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return f"median {statistics.median(samples):.2f} ms, p95 {samples[int(REQUESTS * 0.95)]:.2f} ms"


def main() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    django.setup()
    from django.test import Client
    from django.test.utils import setup_databases, setup_test_environment, teardown_databases

    from tests.factories import make_activity

    setup_test_environment()
    databases = setup_databases(verbosity=0, interactive=False)
    try:
        activity = make_activity(started=False)
        client = Client()
        url = f"/seckill/{activity.pk}/"
        first = client.get(url)
        flag = client.get(f"{url}flag.js?v=x").content
        print(f"page 200: {timed(client, url)} ({REQUESTS} requests, in-process test client)")
        print(f"page 304: {timed(client, url, HTTP_IF_NONE_MATCH=first['ETag'])}")
        print(f"flag.js:  {timed(client, url + 'flag.js?v=x')}")
        print(f"page {len(first.content)} bytes (gzip {len(gzip.compress(first.content))}); flag.js {len(flag)} bytes")
        for name in ("activity.js", "shop.js", "site.css"):
            data = (Path("static/seckill") / name).read_bytes()
            print(f"{name}: {len(data)} bytes (gzip {len(gzip.compress(data))})")
    finally:
        teardown_databases(databases, verbosity=0)


if __name__ == "__main__":
    main()
