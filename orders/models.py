from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from payments.models import BasePayment

# Reservation ids of orders the database path sold from the reserve (Redis away); log
# ids look like "1700000000000-0".
DB_PATH_PREFIX = "db-"


class Order(models.Model):  # type: ignore[django-manager-missing]  # Payment subclasses an untyped BasePayment
    class Status(models.TextChoices):
        PENDING = "pending", _("pending payment")
        PAID = "paid", _("paid")
        CANCELLED = "cancelled", _("cancelled")

    LIVE_STATUSES = (Status.PENDING, Status.PAID)

    # Derived from the reservation (see orders.services.order_number), so a replay can
    # never mint a second number for the same reservation.
    order_no = models.CharField(max_length=40, unique=True)
    # No index of their own: the constraints and indexes below lead with each column (every
    # order row a sale writes would update two more indexes for nothing).
    activity = models.ForeignKey("seckill.Activity", on_delete=models.PROTECT, related_name="orders", db_index=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="seckill_orders", db_index=False
    )
    quantity = models.PositiveIntegerField()
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    cancel_reason = models.CharField(max_length=40, blank=True)
    shard = models.PositiveSmallIntegerField(default=0)
    # The id of the reservation-log entry (of the shard's log) this order was made from.
    reservation_id = models.CharField(max_length=64)
    pay_deadline = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # The final judge of "one order per shopper": at most one live order per activity.
            models.UniqueConstraint(
                fields=["activity", "user"],
                condition=models.Q(status__in=["pending", "paid"]),
                name="orders_one_live_order_per_user",
            ),
            # One order per reservation: a task delivered twice inserts once.
            models.UniqueConstraint(fields=["activity", "shard", "reservation_id"], name="orders_one_per_reservation"),
            models.CheckConstraint(condition=models.Q(quantity__gte=1), name="orders_quantity_positive"),
        ]
        indexes = [
            models.Index(fields=["user", "-created_at"]),
            models.Index(fields=["activity", "status"]),
            models.Index(fields=["status", "pay_deadline"]),
        ]

    def __str__(self) -> str:
        return self.order_no

    @property
    def from_reserve(self) -> bool:
        """Sold by the database path from the reserve: its units never were in Redis."""
        return self.reservation_id.startswith(DB_PATH_PREFIX)


class ReleasedReservation(models.Model):
    """A reservation given back without an order (the database guard said no, the shopper
    already had one, the replay gave up, staff returned it): its units went back on sale in
    Redis (or, when the guard found none, left Redis's count), so it must never become an
    order as well. Recorded before the Redis release, under
    the stock row's lock, so a late or concurrent consumer of the same reservation finds
    it (``orders.services.reservation_give_up``)."""

    activity = models.ForeignKey("seckill.Activity", on_delete=models.CASCADE, related_name="+")
    shard = models.PositiveSmallIntegerField(default=0)
    reservation_id = models.CharField(max_length=64)
    reason = models.CharField(max_length=40)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["activity", "shard", "reservation_id"], name="released_reservation_once")
        ]

    def __str__(self) -> str:
        return f"{self.activity_id}-{self.shard}-{self.reservation_id} ({self.reason})"


class AnomalyOrder(models.Model):
    """Something Redis and the database disagree on, for staff to review."""

    class Kind(models.TextChoices):
        DB_GUARD_FAILED = "db_guard_failed", _("database had no stock for a Redis reservation")
        DUPLICATE_RESERVATION = "duplicate_reservation", _("reservation for a shopper who already has an order")
        REPLAY_EXHAUSTED = "replay_exhausted", _("reservation could not become an order")
        PAID_NOT_DEDUCTED = "paid_not_deducted", _("paid order without a stock deduction")
        ORDER_NOT_DEDUCTED = "order_not_deducted", _("pending order without a stock deduction")
        DRIFT = "drift", _("stock drift reconciliation cannot explain")

    class Status(models.TextChoices):
        OPEN = "open", _("open")
        RESOLVED = "resolved", _("resolved")

    kind = models.CharField(max_length=30, choices=Kind.choices)
    activity = models.ForeignKey("seckill.Activity", on_delete=models.PROTECT, related_name="anomalies")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    order = models.ForeignKey(Order, null=True, blank=True, on_delete=models.PROTECT, related_name="anomalies")
    reservation_id = models.CharField(max_length=64, blank=True)
    # The stock shard its reservation or order came from (S > 1): log ids are unique per
    # shard only, and a staff return gives the units back to this shard.
    shard = models.PositiveSmallIntegerField(default=0)
    # Names the fault for anomalies without a reservation ("order:<id>", "redis:-3"), so
    # a reconciliation run that sees the same fault again does not open it twice.
    fault_key = models.CharField(max_length=100, blank=True)
    details = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    resolution_note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    # What staff did about it: [{"action", "by", "at", "note", "result"}, …], oldest first.
    history = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # Opening the same anomaly twice (a retried task) records it once.
            models.UniqueConstraint(
                fields=["kind", "activity", "shard", "reservation_id"],
                condition=~models.Q(reservation_id=""),
                name="anomaly_once_per_shard_reservation",
            ),
            models.UniqueConstraint(
                fields=["kind", "activity", "fault_key"],
                condition=~models.Q(fault_key=""),
                name="anomaly_once_per_fault",
            ),
        ]
        indexes = [models.Index(fields=["status", "kind"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"


class ReconciliationReport(models.Model):
    """One reconciliation run: what it measured, found and did (seckill.reconciliation)."""

    activity = models.ForeignKey("seckill.Activity", on_delete=models.CASCADE, related_name="reconciliation_reports")
    created_at = models.DateTimeField(auto_now_add=True)
    identity_ok = models.BooleanField()
    final = models.BooleanField(default=False, help_text=_("the run made when the activity was closed"))
    anomalies_opened = models.PositiveIntegerField(default=0)
    actions_taken = models.PositiveIntegerField(default=0)
    report = models.JSONField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["activity", "created_at"])]

    def __str__(self) -> str:
        return f"reconciliation of activity {self.activity_id} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class Payment(BasePayment):
    """One attempt to pay an order through a provider (django-payments' model: ``variant``
    is the provider, ``token`` the reference, ``status`` waiting / confirmed / rejected /
    refunded). Only a verified notification confirms it; ``settled_at`` is set when the
    shop has acted on the confirmation (paid the order, or refunded a late or second
    payment), so a notification delivered again acts once."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="payments")
    settled_at = models.DateTimeField(null=True, blank=True)
    # Why a confirmed payment was given back: "late" (order cancelled or past its
    # deadline) or "duplicate" (the order was already paid).
    refund_reason = models.CharField(max_length=20, blank=True)

    class Meta:
        indexes = [models.Index(fields=["order", "status"])]
        constraints = [models.UniqueConstraint(fields=["token"], name="payment_token_unique")]

    def __str__(self) -> str:
        return f"{self.variant} {self.token} for {self.order_id}"

    def get_failure_url(self) -> str:
        return reverse("my-orders")

    def get_success_url(self) -> str:
        return f"{reverse('my-orders')}?paid={self.order.order_no}"
