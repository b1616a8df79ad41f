"""The waiting room's JSON API (docs/WAITING-ROOM.md): join, the room's status (the same for
everyone, cacheable for a second), a ticket when let in, the draw's evidence."""

import functools

from django.conf import settings
from django.http import HttpResponse
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api_errors import NO_STORE, ErrorSerializer, error_json
from core.client_address import client_ip
from core.errors import api_error_of
from core.log_filters import expected_rejection_unlogged
from seckill.room.draw import room_draw
from seckill.room.queue import room_join
from seckill.room.status import estimate_seconds, room_standing, room_status, status_bytes
from seckill.room.tickets import room_ticket_issue
from seckill.sale.apis import snapshot_or_404
from seckill.sale.snapshot import ActivitySnapshot
from seckill.traffic import TrafficLimits, ip_bucket, rate_parse, traffic_limits_check
from stock.scripts import RateLimit

_ERR = OpenApiResponse(ErrorSerializer)
STATUS_CACHE = "public, max-age=1"


def join_limits(request, activity: ActivitySnapshot) -> TrafficLimits:
    """Joins per client address (SECKILL_ROOM_JOINS_PER_IP; an IPv6 client counts per /64)."""
    rate = rate_parse(getattr(settings, "SECKILL_ROOM_JOINS_PER_IP", "30/m"))
    ip = client_ip(request) if rate else None
    if not rate or not ip:
        return TrafficLimits(f"room:{activity.id}", None, None)
    bucket = ip_bucket(ip)
    return TrafficLimits(f"room:{activity.id}", None, RateLimit(f"seckill:rl:room:{activity.id}:ip:{bucket}", *rate))


RoomStatusSerializer = inline_serializer(
    "RoomStatus",
    fields={
        "state": serializers.ChoiceField(["not_open", "pre_queue", "drawing", "open", "paused", "closed", "ended"]),
        "now_serving": serializers.IntegerField(help_text="Places let in so far: place <= now_serving may buy"),
        "queued": serializers.IntegerField(help_text="Places given so far"),
        "waiting": serializers.IntegerField(help_text="Joined and not let in yet"),
        "admitted_active": serializers.IntegerField(),
        "noshows": serializers.IntegerField(),
        "used": serializers.IntegerField(help_text="Tickets used"),
        "pre_queue": serializers.IntegerField(help_text="Joiners before the start"),
        "sold_out": serializers.BooleanField(),
        "closed_at": serializers.DateTimeField(allow_null=True),
        "rate": serializers.IntegerField(help_text="Configured admission rate, shoppers per second"),
        "measured_rate": serializers.FloatField(allow_null=True, help_text="Over about the last ten seconds"),
        "commitment": serializers.CharField(allow_null=True, help_text="sha256(seed), published before the start"),
        "seed": serializers.CharField(allow_null=True, help_text="Published once the draw is made"),
        "server_time": serializers.DateTimeField(),
    },
)
JoinSerializer = inline_serializer(
    "RoomJoined",
    fields={
        "place": serializers.IntegerField(allow_null=True, help_text="null: in the pre-queue until the draw"),
        "pre_queue": serializers.BooleanField(),
        "ahead": serializers.IntegerField(allow_null=True),
        "estimate_seconds": serializers.IntegerField(allow_null=True),
        "room": RoomStatusSerializer,
    },
)
StandingSerializer = inline_serializer(
    "RoomStanding",
    fields={
        "joined": serializers.BooleanField(),
        "place": serializers.IntegerField(allow_null=True, help_text="null: not joined, or in the pre-queue"),
        "pre_queue": serializers.BooleanField(),
        "order": inline_serializer(
            "RoomStandingOrder",
            fields={
                "order_no": serializers.CharField(),
                "status": serializers.ChoiceField(["pending", "paid"]),
                "url": serializers.CharField(help_text="The order's page"),
            },
            allow_null=True,
        ),
    },
)
TicketSerializer = inline_serializer(
    "RoomTicket",
    fields={
        "ticket": serializers.CharField(help_text="Send it as `ticket` in the purchase body; single use"),
        "expires_at": serializers.DateTimeField(),
    },
)


class RoomStatusApi(APIView):
    """The room as everyone sees it: the same bytes for every caller for a second."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(operation_id="room_status", responses={200: RoomStatusSerializer, 404: _ERR, 409: _ERR, 503: _ERR})
    def get(self, request, activity_id: int):
        status = room_status(snapshot_or_404(activity_id), now=timezone.now())
        return Response(status.as_json(), headers={"Cache-Control": STATUS_CACHE})


_status_drf = RoomStatusApi.as_view()


def room_status_view(request, activity_id: int):
    """GET /api/activities/<id>/room: the status as bytes without DRF's request machinery
    (the same answer as RoomStatusApi, which documents it and answers anything else)."""
    if request.method != "GET":
        return _status_drf(request, activity_id=activity_id)
    try:
        activity = snapshot_or_404(activity_id)
        status = room_status(activity, now=timezone.now())
    except Exception as exc:
        known = api_error_of(exc)
        if known is None:
            raise
        return error_json(known)
    response = HttpResponse(status_bytes(activity.id, status), content_type="application/json")
    response["Cache-Control"] = STATUS_CACHE
    return response


functools.update_wrapper(room_status_view, _status_drf)


class RoomJoinApi(APIView):
    """Join the waiting room; joining again answers the same place."""

    @extend_schema(
        operation_id="room_join",
        request=None,
        responses={200: JoinSerializer, **{code: _ERR for code in (401, 403, 404, 409, 429, 503)}},
    )
    def post(self, request, activity_id: int):
        activity = snapshot_or_404(activity_id)
        traffic_limits_check(join_limits(request, activity), user_id=request.user.pk)
        now = timezone.now()
        joined = room_join(activity, user_id=request.user.pk, now=now)
        status = room_status(activity, now=now)
        ahead = None if joined.place is None else max(0, joined.place - status.now_serving - 1)
        body = {
            "place": joined.place,
            "pre_queue": joined.pre_queue,
            "ahead": ahead,
            "estimate_seconds": None if ahead is None else estimate_seconds(ahead=ahead, status=status),
            "room": status.as_json(),
        }
        return Response(body, headers=NO_STORE)


class RoomStandingApi(APIView):
    """Where the calling shopper stands (their place, their live order), without joining:
    the room's page asks it on load, so a reload or a second tab remembers the shopper."""

    @extend_schema(
        operation_id="room_standing",
        responses={200: StandingSerializer, **{code: _ERR for code in (401, 403, 404, 409, 503)}},
    )
    def get(self, request, activity_id: int):
        standing = room_standing(snapshot_or_404(activity_id), user_id=request.user.pk)
        order = standing.order
        shown = None
        if order is not None:
            url = reverse("order-page", args=[order.order_no])
            shown = {"order_no": order.order_no, "status": order.status, "url": url}
        body = {"joined": standing.joined, "place": standing.place, "pre_queue": standing.pre_queue, "order": shown}
        return Response(body, headers=NO_STORE)


# The ticket endpoint's refusals that a waiting room gives by design (asked too early, too
# late, after buying, sold out): answers, not incidents, so not logged one by one.
EXPECTED_REFUSALS = frozenset({"not_joined", "not_admitted", "admission_expired", "ticket_used", "sold_out"})


class RoomTicketApi(APIView):
    """The ticket of a shopper the room has let in (the same ticket if asked again)."""

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        if isinstance(getattr(response, "data", None), dict) and response.data.get("code") in EXPECTED_REFUSALS:
            response._has_been_logged = True  # type: ignore[attr-defined]  # Django's log_response skips it
        return expected_rejection_unlogged(response)

    @extend_schema(
        operation_id="room_ticket",
        request=None,
        responses={200: TicketSerializer, **{code: _ERR for code in (401, 403, 404, 409, 410, 503)}},
    )
    def post(self, request, activity_id: int):
        ticket = room_ticket_issue(snapshot_or_404(activity_id), user_id=request.user.pk)
        return Response({"ticket": ticket.ticket, "expires_at": ticket.expires_at}, headers=NO_STORE)


class RoomDrawApi(APIView):
    """The evidence of the draw: the commitment before the start; the seed and the
    pre-queue's joiners after it (places = joiners sorted by sha256("<seed>:<id>"))."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(
        operation_id="room_draw",
        responses={
            200: inline_serializer(
                "RoomDraw",
                fields={
                    "commitment": serializers.CharField(allow_null=True),
                    "seed": serializers.CharField(allow_null=True),
                    "joiners": serializers.ListField(child=serializers.IntegerField(), allow_null=True),
                    "rule": serializers.CharField(),
                },
            ),
            404: _ERR,
            409: _ERR,
            503: _ERR,
        },
    )
    def get(self, request, activity_id: int):
        draw = room_draw(snapshot_or_404(activity_id))
        return Response(draw, headers={"Cache-Control": "public, max-age=5"})
