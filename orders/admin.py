from django.contrib import admin

from .models import AnomalyOrder, Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = [
        "order_no",
        "activity",
        "user",
        "quantity",
        "amount",
        "status",
        "pay_deadline",
        "created_at",
        "paid_at",
    ]
    list_filter = ["status", "activity"]
    search_fields = ["order_no", "user__username", "reservation_id"]
    list_select_related = ["activity", "user"]
    readonly_fields = [f.name for f in Order._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AnomalyOrder)
class AnomalyOrderAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "activity", "user", "order", "status", "created_at", "resolved_by"]
    list_filter = ["status", "kind", "activity"]
    search_fields = ["reservation_id", "user__username", "order__order_no"]
    list_select_related = ["activity", "user", "order", "resolved_by"]
    readonly_fields = [
        "kind",
        "activity",
        "user",
        "order",
        "reservation_id",
        "details",
        "created_at",
        "resolved_by",
        "resolved_at",
    ]

    def has_add_permission(self, request):
        return False
