from rest_framework import serializers

from .models import Order
from .payments import payment_status_of


class OrderSerializer(serializers.ModelSerializer):
    payment_status = serializers.SerializerMethodField()

    def get_payment_status(self, order: Order) -> str:
        return payment_status_of(order.payments.all())

    class Meta:
        model = Order
        fields = [
            "order_no",
            "activity",
            "quantity",
            "amount",
            "status",
            "cancel_reason",
            "pay_deadline",
            "created_at",
            "paid_at",
            "payment_status",
        ]
        read_only_fields = fields
