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


# Refusals that also come by the thousand a second, named by their JSON code because their
# status alone would also cover incidents worth a line (a 403 may be a blacklisted bot):
# a sale not started or over, a waiting-room sale's purchase without its ticket or with a
# used one.
EXPECTED_CODES = frozenset({"not_started", "ended", "ticket_required", "ticket_used"})


def rejection_expected(status: int, code: object) -> bool:
    return status in ExpectedRejectionFilter.EXPECTED or code in EXPECTED_CODES


def expected_rejection_unlogged(response):
    """Spare the hot path the log record of an expected refusal: Django's ``log_response``
    skips a response marked as logged (as it marks the ones it logs)."""
    data = getattr(response, "data", None)
    if rejection_expected(response.status_code, data.get("code") if isinstance(data, dict) else None):
        response._has_been_logged = True
    return response
