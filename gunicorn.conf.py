"""Read by gunicorn from the working directory (``make run``, the tests, production).

In Prometheus multiprocess mode a dead worker's live gauges (the breaker state) must
stop counting; its counters stay, as Prometheus expects."""

import os


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
