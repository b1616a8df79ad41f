"""The sale's public JSON: the list of sales, one sale, and its flag (thin views over
seckill.sale's selectors and pages)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from core.api_errors import NO_STORE, ErrorSerializer
from core.errors import ApiError
from seckill.models import Activity
from seckill.sale.listing import PageNotFound, activities_page, page_number_parse
from seckill.sale.pages import page_flag
from seckill.sale.selectors import units_left_many
from seckill.sale.serializers import ActivitySerializer, FlagSerializer
from seckill.sale.snapshot import ActivitySnapshot, activity_absent, activity_snapshot

_ERR = OpenApiResponse(ErrorSerializer)


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
