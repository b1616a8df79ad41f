"""The purchase's body: {token, quantity=1, captcha_id?, captcha_answer?, ticket?}, checked
before anything else reads it (400 invalid_request)."""

from dataclasses import dataclass

from core.errors import ApiError
from seckill.sale.snapshot import ActivitySnapshot

MAX_TOKEN_LENGTH = 128
MAX_CAPTCHA_FIELD_LENGTH = 64
ALLOWED_FIELDS = frozenset({"token", "quantity", "captcha_id", "captcha_answer", "ticket"})


@dataclass(frozen=True)
class PurchaseBody:
    token: str
    quantity: int
    captcha_id: str | None = None
    captcha_answer: str | None = None


def _optional_text(data: dict, field: str, *, number_ok: bool = False) -> str | None:
    value = data.get(field)
    if value is None:
        return None
    if number_ok and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # an arithmetic answer may come as a number
    # A lone surrogate ("\ud800" is valid JSON) is no text: no Redis key can be made of it.
    if not isinstance(value, str) or len(value) > MAX_CAPTCHA_FIELD_LENGTH or not _is_text(value):
        raise ApiError(
            400, "invalid_request", f"{field} must be a string of at most {MAX_CAPTCHA_FIELD_LENGTH} characters."
        )
    return value.strip() or None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def purchase_body_parse(data, *, activity: ActivitySnapshot) -> PurchaseBody:
    """Validate the purchase body: {token, quantity=1, captcha_id?, captcha_answer?}."""
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
    return PurchaseBody(
        token, quantity, _optional_text(data, "captcha_id"), _optional_text(data, "captcha_answer", number_ok=True)
    )
