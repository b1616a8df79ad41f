from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView, RetrieveAPIView

from .models import Order
from .serializers import OrderSerializer


class OrderListApi(ListAPIView):
    serializer_class = OrderSerializer

    def get_queryset(self):
        return Order.objects.filter(user_id=self.request.user.pk).order_by("-created_at", "-id")


@extend_schema(responses=OrderSerializer)
class OrderDetailApi(RetrieveAPIView):
    serializer_class = OrderSerializer
    lookup_field = "order_no"

    def get_queryset(self):
        # Someone else's order is simply not found.
        return Order.objects.filter(user_id=self.request.user.pk)
