"""The JSON API of the flash sale: thin views over gates, services and selectors."""

import functools

from django.http import JsonResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from orders.serializers import OrderSerializer

from .captcha import captcha_issue
from .errors import ApiError
from .gates import (
    purchase_blacklist_check,
    purchase_body_parse,
    purchase_captcha_check,
    purchase_eligibility_check,
    purchase_front_check,
    purchase_front_gates,
    purchase_front_passed,
    traffic_limit_check,
)
from .models import Activity
from .selectors import ActivitySnapshot, activity_snapshot, purchase_result, redis_remaining_many
from .serializers import (
    ActivitySerializer,
    CaptchaSerializer,
    ErrorSerializer,
    FlagSerializer,
    PurchaseQueuedSerializer,
    PurchaseRequestSerializer,
)
from .services import activity_flag, purchase_reserve

NO_STORE = {"Cache-Control": "no-store, max-age=0"}
_ERR = OpenApiResponse(ErrorSerializer)


def error_json(exc: ApiError) -> JsonResponse:
    """The same body and headers as the DRF exception handler, without DRF."""
    body = {"code": exc.code, "detail": exc.detail}
    response = JsonResponse(body, status=exc.status)
    response.data = body  # as on a DRF Response: the purchase metrics read the code from it
    for name, value in exc.headers().items():
        response[name] = value
    return response


def snapshot_or_404(activity_id: int) -> ActivitySnapshot:
    activity = activity_snapshot(activity_id)
    if activity is None:
        raise ApiError(404, "not_found", "No such activity.")
    return activity


class ActivityListApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses=ActivitySerializer(many=True))
    def get(self, request):
        activities = list(Activity.objects.select_related("product").order_by("start_at")[:200])
        remaining = redis_remaining_many([a.pk for a in activities])
        return Response(ActivitySerializer(activities, many=True, context={"remaining": remaining}).data)


class ActivityDetailApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses={200: ActivitySerializer, 404: _ERR})
    def get(self, request, activity_id: int):
        activity = Activity.objects.select_related("product").filter(pk=snapshot_or_404(activity_id).id).first()
        if activity is None:
            raise ApiError(404, "not_found", "No such activity.")
        remaining = redis_remaining_many([activity.pk])
        return Response(ActivitySerializer(activity, context={"remaining": remaining}).data)


class FlagApi(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(responses={200: FlagSerializer, 404: _ERR})
    def get(self, request, activity_id: int):
        flag = activity_flag(activity=snapshot_or_404(activity_id), now=timezone.now())
        return Response(FlagSerializer(flag).data, headers=NO_STORE)


class PurchaseApi(APIView):
    @classmethod
    def as_view(cls, **initkwargs):
        """The front gates answer first (see gates.purchase_front_gates); DRF does the rest."""
        view = super().as_view(**initkwargs)

        def purchase(request, *args, **kwargs):
            try:
                purchase_front_gates(request, activity_id=kwargs["activity_id"])
            except ApiError as exc:
                return error_json(exc)
            return view(request, *args, **kwargs)

        return functools.update_wrapper(purchase, view)  # keeps .cls and csrf_exempt (schema, middleware)

    @extend_schema(
        request=PurchaseRequestSerializer,
        responses={
            202: PurchaseQueuedSerializer,
            **{code: _ERR for code in (400, 401, 403, 404, 409, 410, 415, 429, 503)},
        },
    )
    def post(self, request, activity_id: int):
        # The order of API.md: the first check that fails answers.
        activity = snapshot_or_404(activity_id)
        body = purchase_body_parse(request.data, activity=activity)
        now = timezone.now()
        user_id = request.user.pk
        if not purchase_front_passed(request):
            purchase_front_check(request, activity=activity, user_id=user_id, body=body, now=now)
        purchase_blacklist_check(request, user_id=user_id)
        purchase_eligibility_check(activity, user_id=user_id, now=now)
        purchase_captcha_check(activity, user_id=user_id, body=body)
        reserved = purchase_reserve(activity=activity, user_id=user_id, quantity=body.quantity)
        return Response(
            {"code": "queued", "reservation": reserved.reservation_id, "remaining": reserved.remaining}, status=202
        )


class CaptchaApi(APIView):
    """A one-time challenge for activities that ask for one; answer it in the purchase body."""

    @extend_schema(request=None, responses={201: CaptchaSerializer, 401: _ERR, 404: _ERR, 429: _ERR})
    def post(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        traffic_limit_check(
            request,
            scope=f"captcha:{activity.id}",
            user_id=request.user.pk,
            rate_per_user=activity.rate_per_user,
            rate_per_ip=activity.rate_per_ip,
        )
        challenge = captcha_issue(activity_id=activity.id, user_id=request.user.pk)
        return Response(CaptchaSerializer(challenge).data, status=201, headers=NO_STORE)


class ResultApi(APIView):
    @extend_schema(responses={200: None, 401: _ERR, 404: _ERR})
    def get(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        code, value = purchase_result(activity_id=activity.id, user_id=request.user.pk)
        body = {"code": code, "order": OrderSerializer(value).data if code == "ordered" else None}
        if code == "failed":
            body["reason"] = value
        return Response(body, headers=NO_STORE)
