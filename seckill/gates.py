"""Gate 1 of the purchase path: checks in the web process, before Redis is touched.

Each check raises ApiError; they run in the order API.md gives.
"""

import hmac
from datetime import datetime

from .errors import ApiError
from .models import Activity
from .selectors import ActivitySnapshot
from .services import activity_token_ensure

MAX_TOKEN_LENGTH = 128
ALLOWED_FIELDS = frozenset({"token", "quantity"})


def purchase_body_parse(data, *, activity: ActivitySnapshot) -> tuple[str, int]:
    """Validate the purchase body; returns (token, quantity)."""
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "The body must be a JSON object.")
    unknown = set(data) - ALLOWED_FIELDS
    if unknown:
        raise ApiError(400, "invalid_request", f"Unknown field(s): {', '.join(sorted(map(str, unknown)))}.")
    token = data.get("token")
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_LENGTH:
        raise ApiError(400, "invalid_request", "token is required and must be a non-empty string.")
    quantity = data.get("quantity", 1)
    # bool is an int in Python; true is not a quantity.
    if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= activity.per_user_limit:
        raise ApiError(
            400,
            "invalid_request",
            f"quantity must be an integer from 1 to {activity.per_user_limit}.",
        )
    return token, quantity


def purchase_window_check(activity: ActivitySnapshot, now: datetime) -> None:
    phase = activity.phase_at(now)
    if phase == Activity.Phase.UPCOMING:
        raise ApiError(403, "not_started", "The sale has not started yet.")
    if phase == Activity.Phase.ENDED:
        raise ApiError(403, "ended", "The sale has ended.")


def purchase_token_check(activity: ActivitySnapshot, token: str, now: datetime) -> None:
    """The token exists from the start; the first caller after the start creates it if
    the start task has not yet."""
    expected = activity.purchase_token or activity_token_ensure(activity_id=activity.id, now=now)
    # surrogatepass: JSON admits lone surrogates ("\ud800"), which strict UTF-8 cannot encode.
    if not expected or not hmac.compare_digest(expected.encode(), token.encode("utf-8", "surrogatepass")):
        raise ApiError(403, "bad_token", "The purchase token is not valid for this sale.")
