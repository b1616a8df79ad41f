from django.contrib import admin

from .models import Product, SeckillStock, StockMovement


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["name", "list_price", "created_at"]
    search_fields = ["name", "description"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Stock rows and ledger entries change only through the stock services."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(SeckillStock)
class SeckillStockAdmin(ReadOnlyAdmin):
    """Read-only: stock changes only through the stock services."""

    list_display = ["activity", "total", "available", "version", "updated_at"]
    search_fields = ["activity__title"]


@admin.register(StockMovement)
class StockMovementAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "activity", "order", "kind", "quantity", "reason"]
    list_filter = ["kind", "reason"]
    search_fields = ["order__order_no", "activity__title"]
    list_select_related = ["activity", "order"]
