"""The JSON API of the flash sale: thin views over gates, services and selectors."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from orders.serializers import OrderSerializer

from .errors import ApiError
from .gates import purchase_body_parse, purchase_token_check, purchase_window_check
from .models import Activity
from .selectors import ActivitySnapshot, activity_snapshot, purchase_result, redis_remaining_many
from .serializers import (
    ActivitySerializer,
    ErrorSerializer,
    FlagSerializer,
    PurchaseQueuedSerializer,
    PurchaseRequestSerializer,
)
from .services import activity_flag, purchase_reserve

NO_STORE = {"Cache-Control": "no-store, max-age=0"}
_ERR = OpenApiResponse(ErrorSerializer)


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
    @extend_schema(
        request=PurchaseRequestSerializer,
        responses={
            202: PurchaseQueuedSerializer,
            **{code: _ERR for code in (400, 401, 403, 404, 409, 410, 415, 429, 503)},
        },
    )
    def post(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        token, quantity = purchase_body_parse(request.data, activity=activity)
        now = timezone.now()
        purchase_window_check(activity, now)
        purchase_token_check(activity, token, now)
        reserved = purchase_reserve(activity=activity, user_id=request.user.pk, quantity=quantity)
        return Response(
            {"code": "queued", "reservation": reserved.reservation_id, "remaining": reserved.remaining}, status=202
        )


class ResultApi(APIView):
    @extend_schema(responses={200: None, 401: _ERR, 404: _ERR})
    def get(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        code, value = purchase_result(activity_id=activity.id, user_id=request.user.pk)
        body = {"code": code, "order": OrderSerializer(value).data if code == "ordered" else None}
        if code == "failed":
            body["reason"] = value
        return Response(body, headers=NO_STORE)
