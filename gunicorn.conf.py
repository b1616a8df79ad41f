"""gunicorn's settings, read from the working directory by every gunicorn here: `make run`,
`make bench`, the tests and production (`gunicorn config.asgi:application`, behind nginx:
deploy/nginx/). Every value can come from the environment; command-line flags override them.

The defaults are what bench/ measured best on a 2-core machine; docs/BENCHMARKS.md has
the figures behind each choice.
"""

import os

from server.handlers import web_threads

bind = os.environ.get("GUNICORN_BIND") or f"127.0.0.1:{os.environ.get('PORT', '8000')}"
# One process per core, each an uvicorn event loop (uvloop, httptools: HTTP parsed in C)
# with a thread pool for Django's synchronous views (server/app.py), and uvicorn's limits
# plus a request head's deadline and size (server/worker.py).
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "server.worker.UvicornWorker")
threads = web_threads()  # gthread's; the uvicorn workers' thread pool reads the same variable
# A flood arrives faster than it is served: let the kernel queue it instead of refusing.
backlog = int(os.environ.get("GUNICORN_BACKLOG", "2048"))
# Seconds an idle keep-alive connection stays open. Longer than nginx's upstream keep-alive
# (deploy/nginx/shop.conf), so nginx, not gunicorn, closes the connections it pools: a
# connection gunicorn closed just as nginx sent a request on it would be a 502.
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "30"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = 5
# Load the app once in the master: workers fork with Django already imported.
preload_app = os.environ.get("GUNICORN_PRELOAD", "true").lower() in ("1", "true", "yes")
# An access log line per request costs the web tier a write; "-" is stdout, empty is off.
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-") or None


def on_starting(server):
    """Every connection is a file: a worker at its open-file limit stops accepting, and the
    shop goes dark for everyone. The soft limit is raised to what the system allows (the
    workers inherit it); uvicorn's limit_concurrency (server/worker.py) answers 503 well
    before it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        server.log.info("open-file limit raised from %s to %s", soft, hard)


def when_ready(server):
    """In the master, before the workers fork: import what Django imports lazily on the
    first request (the URLconf and every view behind it, the Celery publishing path), so
    every worker starts with it and the memory is shared."""
    if not preload_app:
        return
    try:
        from django.urls import get_resolver

        get_resolver().url_patterns  # noqa: B018 (imports config.urls and the views)
        import kombu.transport.redis  # noqa: F401

        import orders.tasks  # noqa: F401
    except Exception as exc:  # the workers import it themselves then
        server.log.warning("pre-import of the URLconf failed: %s", exc)
    from gunicorn.errors import HaltServer

    from seckill.sale.lifecycle import stock_redis_refusal

    refusal = stock_redis_refusal()
    if refusal:
        raise HaltServer(refusal, 4)  # a web tier on a Redis that can lose reservations must not sell
    if os.environ.get("GUNICORN_GC_FREEZE", "true").lower() in ("1", "true", "yes"):
        # Everything imported so far lives as long as the process: out of the collector's
        # sight, a full collection in a worker scans only what requests allocated (shorter
        # pauses, the purchase's tail latency), and the pages stay shared after the fork.
        import gc

        gc.collect()
        gc.freeze()


def post_worker_init(worker):
    """Pay the purchase path's one-off costs before the first shopper does: at the start
    of a sale every worker is hit at once, and a lazy import of the Celery publishing
    path or a first connection would land on the first requests of the flood."""
    try:
        from django.db import connection

        from seckill.tasks import reservations_drain_task
        from stock.redis_client import stock_redis

        connection.ensure_connection()
        # Django's connections are per thread, and the views run on the pool's threads:
        # this one would sit idle for the worker's life, holding a backend.
        connection.close()
        stock_redis().ping()
        with reservations_drain_task.app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)
    except Exception as exc:  # a server that is away now is retried by the requests themselves
        worker.log.warning("warm-up of the purchase path failed: %s", exc)


def child_exit(server, worker):
    """In Prometheus multiprocess mode a dead worker's live gauges (the breaker state)
    must stop counting; its counters stay, as Prometheus expects."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
