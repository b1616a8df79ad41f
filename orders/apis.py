from typing import cast

from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import ApiError
from core.throttles import throttle_api

from .models import Order
from .payments import PaymentError, payment_start
from .selectors import order_of_shopper
from .serializers import OrderSerializer
from .services import OrderNotCancellable, order_cancel


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
        return own_order_or_404(self.request, self.kwargs["order_no"])


class OrderPayApi(APIView):
    """Starts a payment with the configured provider and answers where to pay it. It
    never pays the order: only the provider's verified notification does."""

    @extend_schema(request=None, responses={200: None, 404: None, 409: None, 503: None})
    @throttle_api("order-pay")
    def post(self, request, order_no: str):
        order = own_order_or_404(request, order_no)
        try:
            started = payment_start(order=order)
        except PaymentError as exc:
            raise ApiError(exc.status, exc.code, exc.detail) from exc
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
