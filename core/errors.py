"""The one error type the JSON API answers with: ``{"code": …, "detail": …}``."""

import logging
from typing import overload

from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)

# The database is unreachable (down, restarting, a network cut): an outage, not a bug.
DATABASE_AWAY = (OperationalError, InterfaceError)


class ApiError(Exception):
    def __init__(
        self, status: int, code: str, detail: str, *, retry_after: int | None = None, auth_scheme: str | None = None
    ):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after
        self.auth_scheme = auth_scheme  # a 401's WWW-Authenticate

    def headers(self) -> dict[str, str]:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        if self.auth_scheme:
            headers["WWW-Authenticate"] = self.auth_scheme
        return headers


def busy(detail: str = "The sale is busy; please try again in a moment.") -> ApiError:
    """503 ``busy`` with ``Retry-After``: a dependency is away; the same request may succeed soon."""
    return ApiError(503, "busy", detail, retry_after=2)


def outcome_unknown() -> ApiError:
    """503 ``outcome_unknown`` with ``Retry-After``: the purchase reached Redis and its reply
    was lost, so it may have taken units; the result endpoint (or the same request again)
    says which. Never ``busy``, which promises that nothing was taken."""
    return ApiError(
        503,
        "outcome_unknown",
        "Your purchase may or may not have gone through; check your result in a moment.",
        retry_after=2,
    )


@overload
def api_error_of(exc: ApiError | OperationalError | InterfaceError) -> ApiError: ...
@overload
def api_error_of(exc: BaseException) -> ApiError | None: ...
def api_error_of(exc: BaseException) -> ApiError | None:
    """What the API answers for ``exc``: itself, 503 ``busy`` when the database is away,
    None for anything else (a real bug: logged, and a 500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, DATABASE_AWAY):
        logger.warning("database unavailable, answering busy: %s", exc)  # no traceback: an outage, not a bug
        return busy("The shop's database is not answering; please try again in a moment.")
    return None
