"""Logging filters (imported while settings load: no models here)."""

import logging


class QuietPurchaseRefusals(logging.Filter):
    """Drops django.request's line for a purchase answered with a 4xx (sold out, rate
    limited, duplicate…): thousands a second in a flash sale, each expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        status = getattr(record, "status_code", None)
        path = getattr(request, "path", "")
        return not (status is not None and 400 <= status < 500 and path.endswith("/purchase"))
