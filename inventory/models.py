from django.db import models
from django.utils.translation import gettext_lazy as _


class Product(models.Model):
    name = models.CharField(_("name"), max_length=200)
    description = models.TextField(_("description"), blank=True)
    image_url = models.URLField(_("image URL"), blank=True)
    list_price = models.DecimalField(_("list price"), max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SeckillStock(models.Model):
    """The database's copy of one activity's stock: the guard behind Redis.

    Two shares, each its own conditional counter: ``reserve`` (escrow) is the part of
    ``available`` only the database path sells and Redis never holds; ``available -
    reserve`` is Redis's share. Both change only in ``inventory.services``. Once Redis's
    share has sold out, what is left of the reserve joins it (``released``), so no unit
    stays unsold for want of an outage.
    """

    activity = models.OneToOneField("seckill.Activity", on_delete=models.CASCADE, related_name="stock")
    total = models.PositiveIntegerField()
    available = models.IntegerField()
    reserve = models.PositiveIntegerField(default=0)
    # Reserve units handed to Redis's share once that share had sold out (never back).
    released = models.PositiveIntegerField(default=0)
    version = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "sale stock"
        verbose_name_plural = "sale stock"
        constraints = [
            models.CheckConstraint(condition=models.Q(available__gte=0), name="stock_available_not_negative"),
            models.CheckConstraint(
                condition=models.Q(available__lte=models.F("total")), name="stock_available_within_total"
            ),
            models.CheckConstraint(
                condition=models.Q(reserve__lte=models.F("available")), name="stock_reserve_within_available"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.available}/{self.total}"


class StockMovement(models.Model):
    """The ledger: every change of ``SeckillStock.available``, with its order and reason."""

    class Kind(models.TextChoices):
        DEDUCT = "deduct", _("deduct")
        RETURN = "return", _("return")

    # No index of their own: (activity, kind) and the (order, kind) constraint lead with
    # each column, and a sale writes one ledger row per order.
    activity = models.ForeignKey(
        "seckill.Activity", on_delete=models.CASCADE, related_name="stock_movements", db_index=False
    )
    order = models.ForeignKey(
        "orders.Order", null=True, blank=True, on_delete=models.PROTECT, related_name="stock_movements", db_index=False
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    quantity = models.PositiveIntegerField()
    reason = models.CharField(max_length=60)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            # Each order's units leave the stock once and come back at most once.
            models.UniqueConstraint(
                fields=["order", "kind"], condition=models.Q(order__isnull=False), name="ledger_one_move_per_order_kind"
            ),
        ]
        indexes = [models.Index(fields=["activity", "kind"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.quantity} ({self.reason})"
