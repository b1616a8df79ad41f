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


class SaleRowsAdmin(ReadOnlyAdmin):
    """Rows of one sale (its stock row, its ledger): a user sees those of the sales they see.
    Who sees which sale is the sale's rule; inventory sits below the sale in the layers, so
    it asks the sale's admin (``sale_rows_filter``), and shows nothing without it."""

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        sale = self.model._meta.get_field("activity").related_model
        rows_filter = getattr(self.admin_site._registry.get(sale), "sale_rows_filter", None)
        if rows_filter is None:
            return queryset.none()
        return queryset.filter(rows_filter(request, via="activity__"))


@admin.register(SeckillStock)
class SeckillStockAdmin(SaleRowsAdmin):
    """Read-only: stock changes only through the stock services."""

    list_display = ["activity", "total", "available", "version", "updated_at"]
    search_fields = ["activity__title"]


@admin.register(StockMovement)
class StockMovementAdmin(SaleRowsAdmin):
    list_display = ["created_at", "activity", "order", "kind", "quantity", "reason"]
    list_filter = ["kind", "reason"]
    search_fields = ["order__order_no", "activity__title"]
    list_select_related = ["activity", "order"]
