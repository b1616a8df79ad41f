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
