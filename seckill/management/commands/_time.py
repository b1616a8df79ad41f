from datetime import datetime, timedelta

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime


def parse_when(value: str, *, now: datetime) -> datetime:
    """ISO-8601, or +SECONDS from now."""
    if value.startswith("+"):
        try:
            return now + timedelta(seconds=float(value[1:]))
        except (ValueError, OverflowError) as exc:  # "+abc", "+nan", "+inf", "+1e30"
            raise CommandError(f"{value!r}: expected +SECONDS, e.g. +60") from exc
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"{value!r}: expected an ISO-8601 time such as 2026-12-01T20:00:00+08:00, or +SECONDS")
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed
