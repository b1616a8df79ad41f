"""Starts the servers the test suite needs before Django reads its settings.

Loaded by pytest's ``-p devtools.pytest_plugin`` (pyproject.toml): with no DATABASE_URL /
REDIS_URL in the environment, the embedded PostgreSQL and Redis are started (or reused)
and their URLs put in the environment, which config.settings.test then only reads. What
this run started itself is stopped at its end, so `make test` leaves nothing running;
servers that were already up are left alone.
"""

import os

import pytest

from devtools import embedded

_started: set[str] = set()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # A wrapper runs before every plain implementation, pytest-django's (which reads the
    # settings) included.
    before = embedded.running_services()
    os.environ.update(embedded.ensure_services())
    _started.update(embedded.running_services() - before)
    yield


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if _started:
        embedded.stop_services(set(_started))
        _started.clear()
