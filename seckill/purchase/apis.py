"""The JSON API of the flash sale: thin views over gates, services and selectors."""

import functools

from django.http import JsonResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from core.errors import ApiError, api_error_of
from core.log_filters import expected_rejection_unlogged
from orders.serializers import OrderSerializer
from seckill.models import Activity
from seckill.purchase.captcha import captcha_issue
from seckill.purchase.gates import (
    Admitted,
    activity_absent,
    activity_limits,
    known_shopper,
    purchase_admit,
    token_purchase_admit,
    traffic_limits_check,
)
from seckill.purchase.reserve import purchase_reserve
from seckill.purchase.result import purchase_result
from seckill.purchase.serializers import (
    ActivitySerializer,
    CaptchaSerializer,
    ErrorSerializer,
    FlagSerializer,
    PurchaseQueuedSerializer,
    PurchaseRequestSerializer,
)
from seckill.room.room import room_ticket_consume
from seckill.sale.listing import PageNotFound, activities_page, page_number_parse
from seckill.sale.pages import page_flag
from seckill.sale.selectors import units_left_many
from seckill.sale.snapshot import ActivitySnapshot, activity_snapshot

NO_STORE = {"Cache-Control": "no-store, max-age=0"}
_ERR = OpenApiResponse(ErrorSerializer)


def plain_json(body: dict, *, status: int) -> JsonResponse:
    """What a DRF Response would answer, without DRF."""
    response = JsonResponse(body, status=status)
    # As on a DRF Response (JsonResponse has no such attribute): the purchase metrics read the code from it.
    response.data = body  # type: ignore[attr-defined]
    return response


def error_json(exc: ApiError) -> JsonResponse:
    """The same body and headers as the DRF exception handler, without DRF."""
    response = plain_json({"code": exc.code, "detail": exc.detail}, status=exc.status)
    for name, value in exc.headers().items():
        response[name] = value
    return expected_rejection_unlogged(response)


def purchase_queued(admitted: Admitted) -> dict:
    """The stock script (202, or 409/410/503 raised) for a purchase that passed the checks;
    a waiting room's ticket is used for good once it has reserved."""
    reserved = purchase_reserve(activity=admitted.activity, user_id=admitted.user_id, quantity=admitted.body.quantity)
    if admitted.ticket_nonce is not None:
        room_ticket_consume(admitted.activity, user_id=admitted.user_id, nonce=admitted.ticket_nonce)
    return {"code": "queued", "reservation": reserved.reservation_id, "remaining": reserved.remaining}


def snapshot_or_404(activity_id: int) -> ActivitySnapshot:
    activity = activity_snapshot(activity_id)
    if activity is None:
        raise activity_absent()
    return activity


class ActivityListApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    """Upcoming and live sales first, newest first, then the ended ones (seckill.sale.listing),
    in DRF's page style; ``?page=N``."""

    @extend_schema(
        operation_id="activities_list",
        parameters=[OpenApiParameter("page", int, description="page number, from 1")],
        responses={
            200: inline_serializer(
                "ActivityPage",
                fields={
                    "count": serializers.IntegerField(),
                    "next": serializers.URLField(allow_null=True),
                    "previous": serializers.URLField(allow_null=True),
                    "results": ActivitySerializer(many=True),
                },
            ),
            404: _ERR,
        },
    )
    def get(self, request):
        try:
            page = activities_page(number=page_number_parse(request.query_params.get("page")))
        except PageNotFound as exc:
            raise ApiError(404, "not_found", "No such page.") from exc
        url = request.build_absolute_uri()
        previous = None
        if page.has_previous:  # as DRF's PageNumberPagination: page 1 has no page parameter
            previous = remove_query_param(url, "page")
            if page.number > 2:
                previous = replace_query_param(url, "page", page.number - 1)
        results = ActivitySerializer(page.activities, many=True, context={"remaining": page.remaining}).data
        return Response(
            {
                "count": page.count,
                "next": replace_query_param(url, "page", page.number + 1) if page.has_next else None,
                "previous": previous,
                "results": results,
            }
        )


class ActivityDetailApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses={200: ActivitySerializer, 404: _ERR})
    def get(self, request, activity_id: int):
        activity = Activity.objects.select_related("product").filter(pk=snapshot_or_404(activity_id).id).first()
        if activity is None:
            raise activity_absent()
        remaining = units_left_many([activity.pk])
        return Response(ActivitySerializer(activity, context={"remaining": remaining}).data)


class FlagApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses={200: FlagSerializer, 404: _ERR})
    def get(self, request, activity_id: int):
        flag = page_flag(activity=snapshot_or_404(activity_id), now=timezone.now())
        return Response(FlagSerializer(flag).data, headers=NO_STORE)


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
        return Response(purchase_queued(admitted), status=202)


_purchase_drf = PurchaseApi.as_view()


def purchase_token_answer(request, *, activity_id: int) -> tuple[int, dict] | ApiError:
    """A token-authenticated JSON purchase (nearly the whole flood): (202, body) or the
    refusal, the checks run once. The server's one way into the sale (server.app) and the
    URL's view both answer with it; a purchase by session goes to DRF's view."""
    try:
        return 202, purchase_queued(token_purchase_admit(request, activity_id=activity_id))
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
