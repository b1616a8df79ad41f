"""Fixtures of the gate tests."""

import pytest

from ..helpers import start_gunicorn, subprocess_env


@pytest.fixture
def gunicorn(transactional_db, process_logs):
    """Starts gunicorn with extra settings in its environment: ``gunicorn(workers=2,
    threads=16, **settings)`` returns its base URL; every one started is stopped at the end."""
    started = []

    def start(*, workers: int = 2, threads: int = 16, **env):
        process, base = start_gunicorn(process_logs, workers=workers, threads=threads, env=subprocess_env(**env))
        started.append(process)
        return base

    yield start
    for process in started:
        process.stop()
