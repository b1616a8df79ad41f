"""Bench-only API views (mounted by SECKILL_BENCH_VIEWS under /api/bench/, so that a
token-authenticated call takes the same short middleware chain as the real purchase)."""

from core.api_errors import error_json, plain_json
from core.errors import ApiError
from seckill.purchase.gates import token_purchase_admit

from .naive import naive_purchase


def naive_purchase_view(request, activity_id: int):
    """The database-direct purchase behind the real purchase's own gates
    (``token_purchase_admit``: authentication, body, time window, token, rate limits, the
    shopper checks); only the stock step differs: one database transaction instead of
    the Lua script. Answers as the real purchase does, without DRF."""
    try:
        passed = token_purchase_admit(request, activity_id=activity_id)
        if passed is None:  # the bench sends only well-formed token-authenticated calls
            raise ApiError(400, "invalid_request", "Token-authenticated JSON purchases only.")
        order = naive_purchase(activity=passed.activity, user_id=passed.user_id, quantity=passed.body.quantity)
    except ApiError as exc:
        return error_json(exc)
    return plain_json({"code": "ordered", "order": order.order_no}, status=202)
