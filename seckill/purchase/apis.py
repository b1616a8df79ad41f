"""The purchase's JSON API: thin views over the gates, the reserve and the shopper's result.

A token-authenticated JSON purchase (nearly the whole flood) is answered by
``purchase_token_answer``: the server's one way into the sale (server.app) calls it, and so
does the URL's view; a purchase by session (the shop's own page) goes to DRF's
``PurchaseApi``, which runs the same checks (``purchase_admit``) once."""

import functools

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_errors import NO_STORE, ErrorSerializer, error_json, plain_json
from core.errors import ApiError, api_error_of
from orders.serializers import OrderSerializer
from seckill.purchase.captcha import captcha_issue
from seckill.purchase.gates import (
    Admitted,
    activity_limits,
    known_shopper,
    purchase_admit,
    token_purchase_admit,
    traffic_limits_check,
)
from seckill.purchase.reserve import purchase_reserve
from seckill.purchase.result import purchase_result
from seckill.purchase.serializers import CaptchaSerializer, PurchaseQueuedSerializer, PurchaseRequestSerializer
from seckill.room.tickets import room_ticket_consume
from seckill.sale.apis import snapshot_or_404

_ERR = OpenApiResponse(ErrorSerializer)


def purchase_reserve_answer(admitted: Admitted) -> dict:
    """Reserve for a purchase that passed every check — the stock script: 202's body, or
    409/410/503 raised — and use up its waiting-room ticket once it has reserved."""
    reserved = purchase_reserve(activity=admitted.activity, user_id=admitted.user_id, quantity=admitted.body.quantity)
    if admitted.ticket_nonce is not None:
        room_ticket_consume(admitted.activity, user_id=admitted.user_id, nonce=admitted.ticket_nonce)
    return {"code": "queued", "reservation": reserved.reservation_id, "remaining": reserved.remaining}


class PurchaseApi(APIView):
    """Purchases that are not a plain token-authenticated JSON call (sessions, malformed
    input); ``purchase`` below is the URL's view."""

    @extend_schema(
        request=PurchaseRequestSerializer,
        responses={
            202: PurchaseQueuedSerializer,
            **{code: _ERR for code in (400, 401, 403, 404, 409, 410, 415, 429, 503)},
        },
    )
    def post(self, request, activity_id: int):
        admitted = purchase_admit(
            request,
            activity=snapshot_or_404(activity_id),
            data=request.data,
            now=timezone.now(),
            identify=known_shopper(request.user.pk),  # DRF has authenticated (401 before this)
        )
        return Response(purchase_reserve_answer(admitted), status=202)


_purchase_drf = PurchaseApi.as_view()


def purchase_token_answer(request, *, activity_id: int) -> tuple[int, dict] | ApiError:
    """A token-authenticated JSON purchase (nearly the whole flood): (202, body) or the
    refusal, the checks run once. The server's one way into the sale (server.app) and the
    URL's view both answer with it; a purchase by session goes to DRF's view."""
    try:
        return 202, purchase_reserve_answer(token_purchase_admit(request, activity_id=activity_id))
    except AuthenticationFailed as exc:
        return ApiError(401, "authentication_failed", str(exc.detail), auth_scheme="Token")
    except Exception as exc:
        # The same answers as DRF's exception handler (api_errors), the database away (an
        # uncached token's lookup) included; anything else is a bug.
        known = api_error_of(exc)
        if known is None:
            raise
        return known


def _token_json(request) -> bool:
    auth = request.META.get("HTTP_AUTHORIZATION", "").split()
    return request.content_type == "application/json" and len(auth) == 2 and auth[0].lower() == "token"


def purchase(request, activity_id: int):
    """POST /api/activities/<id>/purchase: a token-authenticated JSON purchase answered by
    ``purchase_token_answer``; anything else goes to PurchaseApi. Both run
    gates.purchase_admit, then the stock script."""
    if request.method != "POST" or not _token_json(request):
        return _purchase_drf(request, activity_id=activity_id)
    answer = purchase_token_answer(request, activity_id=activity_id)
    if isinstance(answer, ApiError):
        return error_json(answer)
    status, body = answer
    return plain_json(body, status=status)


# The DRF view's attributes (.cls for the schema, csrf_exempt for the middleware).
functools.update_wrapper(purchase, _purchase_drf)


class CaptchaApi(APIView):
    """A one-time challenge for activities that ask for one; answer it in the purchase body."""

    @extend_schema(request=None, responses={201: CaptchaSerializer, 401: _ERR, 404: _ERR, 429: _ERR, 503: _ERR})
    def post(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        traffic_limits_check(activity_limits(request, activity, endpoint="captcha"), user_id=request.user.pk)
        challenge = captcha_issue(activity_id=activity.id, user_id=request.user.pk)
        return Response(CaptchaSerializer(challenge).data, status=201, headers=NO_STORE)


class ResultApi(APIView):
    @extend_schema(responses={200: None, 401: _ERR, 404: _ERR, 503: _ERR})
    def get(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        code, value = purchase_result(activity_id=activity.id, user_id=request.user.pk)
        body: dict[str, object] = {"code": code, "order": OrderSerializer(value).data if code == "ordered" else None}
        if code == "failed":
            body["reason"] = value
        return Response(body, headers=NO_STORE)
