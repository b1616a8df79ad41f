from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from .models import COUNTRIES, Order, ShippingAddress
from .payments import payment_status_of


class ShippingAddressSerializer(serializers.ModelSerializer):
    # DRF's own message repeats the value, which may not even be encodable (a lone surrogate).
    country = serializers.ChoiceField(
        choices=COUNTRIES,
        default="CN",
        error_messages={"invalid_choice": _("Choose a country or region from the list.")},
    )

    class Meta:
        model = ShippingAddress
        fields = [*ShippingAddress.SNAPSHOT_FIELDS, "updated_at"]
        read_only_fields = ["updated_at"]


class AddressCopySerializer(serializers.Serializer):
    """The address an order was paid for (copied when payment started)."""

    recipient = serializers.CharField()
    phone = serializers.CharField()
    country = serializers.CharField()
    region = serializers.CharField()
    city = serializers.CharField()
    line1 = serializers.CharField()
    line2 = serializers.CharField()
    postal_code = serializers.CharField()


class OrderSerializer(serializers.ModelSerializer):
    payment_status = serializers.SerializerMethodField()
    product_name = serializers.CharField(source="activity.product.name", read_only=True)
    activity_title = serializers.CharField(source="activity.title", read_only=True)
    shipping_address = AddressCopySerializer(read_only=True, allow_null=True)

    def get_payment_status(self, order: Order) -> str:
        return payment_status_of(order.payments.all())

    class Meta:
        model = Order
        fields = [
            "order_no",
            "activity",
            "activity_title",
            "product_name",
            "quantity",
            "amount",
            "status",
            "cancel_reason",
            "pay_deadline",
            "created_at",
            "paid_at",
            "payment_status",
            "shipping_address",
        ]
        read_only_fields = fields
