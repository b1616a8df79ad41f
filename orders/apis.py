from typing import cast

from django.core.exceptions import ValidationError as ModelValidationError
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import ApiError
from core.throttles import throttle_api

from .models import Order
from .payments import PaymentError, payment_start_for_shopper
from .selectors import address_of, order_of_shopper
from .serializers import OrderSerializer, ShippingAddressSerializer
from .services.addresses import address_save
from .services.lifecycle import OrderNotCancellable, order_cancel


def own_order_or_404(request, order_no: str) -> Order:
    order = order_of_shopper(order_no=order_no, user_id=request.user.pk)
    if order is None:
        raise ApiError(404, "not_found", "No such order.")
    return order


def _shopper_id(request: Request) -> int:
    # IsAuthenticated (the default permission) lets only a signed-in shopper this far.
    return cast(int, request.user.pk)


class OrderListApi(ListAPIView):
    serializer_class = OrderSerializer

    def get_queryset(self):
        return (
            Order.objects.filter(user_id=_shopper_id(self.request))
            .select_related("activity__product")
            .prefetch_related("payments")
            .order_by("-created_at", "-id")
        )


@extend_schema(responses=OrderSerializer)
class OrderDetailApi(RetrieveAPIView):
    serializer_class = OrderSerializer
    lookup_field = "order_no"

    def get_queryset(self):
        return Order.objects.filter(user_id=_shopper_id(self.request))

    def get_object(self):
        # Someone else's order is simply not found.
        order = own_order_or_404(self.request, self.kwargs["order_no"])
        return Order.objects.select_related("activity__product").prefetch_related("payments").get(pk=order.pk)


class OrderPayApi(APIView):
    """Starts a payment with the configured provider and answers where to pay it. It
    never pays the order: only the provider's verified notification does."""

    @extend_schema(
        request=None,
        responses={
            200: None,
            404: None,
            409: OpenApiResponse(description="not_payable, or address_required (no shipping address yet)"),
            503: None,
        },
    )
    @throttle_api("order-pay")
    def post(self, request, order_no: str):
        order = own_order_or_404(request, order_no)
        try:
            started = payment_start_for_shopper(order=order)
        except PaymentError as exc:
            raise ApiError(exc.status, exc.code, exc.detail, retry_after=exc.retry_after) from exc
        if started.payment is None:
            return Response({"status": Order.Status.PAID.value})
        payment = started.payment
        return Response(
            {
                "status": "pending",
                "payment": {"provider": payment.variant, "reference": payment.token, "pay_url": started.pay_url},
            }
        )


class OrderCancelApi(APIView):
    @extend_schema(request=None, responses={200: None, 404: None, 409: None})
    @throttle_api("order-cancel")
    def post(self, request, order_no: str):
        order = own_order_or_404(request, order_no)
        try:
            order = order_cancel(order=order, reason="shopper")
        except OrderNotCancellable as exc:
            raise ApiError(409, "not_cancellable", str(exc)) from exc
        return Response({"status": order.status})


class ShippingAddressApi(APIView):
    """The shopper's shipping address: asked for before payment, copied onto the order
    when payment starts."""

    @extend_schema(responses={200: ShippingAddressSerializer, 404: None})
    def get(self, request):
        address = address_of(user_id=_shopper_id(request))
        if address is None:
            raise ApiError(404, "not_found", "No shipping address yet.")
        return Response(ShippingAddressSerializer(address).data)

    @extend_schema(request=ShippingAddressSerializer, responses={200: ShippingAddressSerializer, 400: None})
    def put(self, request):
        shape = ShippingAddressSerializer(data=request.data)
        shape.is_valid(raise_exception=True)
        try:
            address = address_save(user_id=_shopper_id(request), fields=shape.validated_data)
        except ModelValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return Response(ShippingAddressSerializer(address).data)
