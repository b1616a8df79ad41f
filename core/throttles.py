"""Throttles of the shopper's and the operator's forms and calls (django-ratelimit, counted
in the cache Redis): fixed windows named in ``settings.RATELIMIT_RATES``, and their two
answers, a readable 429 page or the API's 429 ``rate_limited`` JSON, both with Retry-After."""

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.shortcuts import render
from django_ratelimit.core import get_usage  # type: ignore[import-untyped]

from .errors import ApiError

RATE_LIMITED_DETAIL = "Too many requests; please wait a moment and try again."


@dataclass(frozen=True)
class Throttled:
    """A window that is full: the request is refused for ``retry_after`` seconds."""

    retry_after: int


def throttle_rate(name: str) -> str | None:
    """The rate of ``name`` ("10/m", "5/15m"), None when throttles are off or it is "off"."""
    rate = settings.RATELIMIT_RATES.get(name)
    if not settings.RATELIMIT_ENABLE or not rate or rate == "off":
        return None
    return rate


def throttle_count(request, *, name: str, key: str, increment: bool = True) -> Throttled | None:
    """Count one request (or, with ``increment=False``, only look) in ``name``'s window
    for ``key``; a Throttled when the window is over its limit. The cache away: let through."""
    rate = throttle_rate(name)
    if rate is None or not key:
        return None
    usage = get_usage(request, group=name, key=lambda _group, _request: key, rate=rate, increment=increment)
    if usage is None or not usage["should_limit"]:
        return None
    return Throttled(retry_after=max(1, math.ceil(usage["time_left"])))


def throttle_at_limit(request, *, name: str, key: str) -> bool:
    """True when ``name``'s window for ``key`` already holds its limit (the next count is over)."""
    rate = throttle_rate(name)
    if rate is None or not key:
        return False
    usage = get_usage(request, group=name, key=lambda _group, _request: key, rate=rate, increment=False)
    return usage is not None and usage["count"] >= usage["limit"]


def throttled_page(request, throttled: Throttled):
    response = render(request, "429.html", {"retry_after": throttled.retry_after}, status=429)
    response["Retry-After"] = str(throttled.retry_after)
    return response


def throttled_error(throttled: Throttled) -> ApiError:
    return ApiError(429, "rate_limited", RATE_LIMITED_DETAIL, retry_after=throttled.retry_after)


def _shopper_key(request) -> str:
    user = request.user
    return f"user:{user.pk}" if user.is_authenticated else ""


def throttle_page(name: str, key: Callable[[object], str] = _shopper_key):
    """A page view's POSTs counted in ``name``'s window (by shopper unless ``key`` says):
    over it, the readable 429 page instead of the view."""

    def decorate(view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            if request.method == "POST":
                throttled = throttle_count(request, name=name, key=key(request))
                if throttled is not None:
                    return throttled_page(request, throttled)
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def throttle_api(name: str, key: Callable[[object], str] = _shopper_key):
    """An APIView method counted in ``name``'s window (by shopper unless ``key`` says):
    over it, 429 ``rate_limited`` with Retry-After (raised, so the API's error handler answers)."""

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, request, *args, **kwargs):
            throttled = throttle_count(request, name=name, key=key(request))
            if throttled is not None:
                raise throttled_error(throttled)
            return method(self, request, *args, **kwargs)

        return wrapper

    return decorate
