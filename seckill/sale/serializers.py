"""The sale's public JSON, described for DRF and the OpenAPI schema."""

from rest_framework import serializers

from seckill.models import Activity


class ActivitySerializer(serializers.ModelSerializer):
    product = serializers.CharField(source="product.name")
    list_price = serializers.DecimalField(source="product.list_price", max_digits=10, decimal_places=2)
    status = serializers.CharField(source="phase", help_text="upcoming, live or ended")
    remaining = serializers.SerializerMethodField(help_text="Units left in Redis (approximate); null if not warmed")

    class Meta:
        model = Activity
        fields = [
            "id",
            "title",
            "product",
            "list_price",
            "seckill_price",
            "start_at",
            "end_at",
            "status",
            "per_user_limit",
            "total_stock",
            "remaining",
        ]

    def get_remaining(self, obj) -> int | None:
        return self.context.get("remaining", {}).get(obj.pk)


class FlagSerializer(serializers.Serializer):
    started = serializers.BooleanField()
    ended = serializers.BooleanField()
    token = serializers.CharField(allow_null=True)
    server_time = serializers.DateTimeField()
    start_at = serializers.DateTimeField()
    end_at = serializers.DateTimeField()
    remaining = serializers.IntegerField(allow_null=True)  # beyond the contract: docs/API.md
    sold_out = serializers.BooleanField()
