"""Logging filters of the web tier."""

import logging


class ExpectedRejectionFilter(logging.Filter):
    """Drop ``django.request``'s WARNING line for the answers a flash sale gives by the
    thousand a second — 409 duplicate, 410 sold out, 429 rate limited. One line each cost
    the web tier more than the rejection itself (docs/BENCHMARKS.md); every other 4xx and
    every 5xx is still logged."""

    EXPECTED = frozenset({409, 410, 429})

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "status_code", None) not in self.EXPECTED


def expected_rejection_unlogged(response):
    """Spare the hot path the log record the filter above would drop anyway: Django's
    ``log_response`` skips a response marked as logged (as it marks the ones it logs)."""
    if response.status_code in ExpectedRejectionFilter.EXPECTED:
        response._has_been_logged = True
    return response
