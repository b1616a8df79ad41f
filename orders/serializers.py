from rest_framework import serializers

from .models import Order


class OrderSerializer(serializers.ModelSerializer):
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
        ]
        read_only_fields = fields
