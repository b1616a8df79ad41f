"""Fixtures of the front door's tests: nginx (the repository's configuration, started by
tests.helpers.start_front) in front of a recording stand-in upstream."""

import pytest

from ..helpers import start_front
from .support import RecordingUpstream


@pytest.fixture
def upstream():
    recorder = RecordingUpstream()
    yield recorder
    recorder.stop()


@pytest.fixture
def front(upstream, process_logs):
    """nginx in front of ``upstream``; yields its base URL, with the upstream's record of
    start_front's readiness probe cleared."""
    process, base = start_front(process_logs, upstream.address)
    upstream.requests.clear()
    yield base
    process.stop()
