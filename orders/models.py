import re
import unicodedata
from typing import Any
from urllib.parse import urljoin

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from payments.core import get_base_url
from payments.models import BasePayment

from core.clock import shop_time

# Reservation ids of orders the database path sold from the reserve (Redis away); log
# ids look like "1700000000000-0".
DB_PATH_PREFIX = "db-"


class Order(models.Model):  # type: ignore[django-manager-missing]  # Payment subclasses an untyped BasePayment
    class Status(models.TextChoices):
        PENDING = "pending", _("pending payment")
        PAID = "paid", _("paid")
        CANCELLED = "cancelled", _("cancelled")

    LIVE_STATUSES = (Status.PENDING, Status.PAID)

    # Derived from the reservation (see orders.services.creation.order_number), so a replay can
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
    # The shopper's address as it was when payment started (ShippingAddress.snapshot): a
    # later edit of the address does not move an order already on its way.
    shipping_address = models.JSONField(null=True, blank=True)
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
        permissions = [("export_order", "Can export orders for fulfilment")]
        # Six indexes per order row, each one some lookup's: the primary key, the two
        # constraints above (an activity's orders, its live ones, a shopper's live one),
        # order_no's unique index, a shopper's orders and the deadline sweep. No
        # (activity, status) index: an activity's orders of one status are found by
        # combining the reservation constraint and (status, pay_deadline), as fast
        # (orders 0012); nor order_no's varchar_pattern_ops twin: nothing searches a prefix.
        indexes = [
            models.Index(fields=["user", "-created_at"]),
            models.Index(fields=["status", "pay_deadline"]),
        ]

    def __str__(self) -> str:
        return self.order_no

    @property
    def from_reserve(self) -> bool:
        """Sold by the database path from the reserve: its units never were in Redis."""
        return self.reservation_id.startswith(DB_PATH_PREFIX)

    @property
    def shipping_lines(self) -> list[str]:
        return address_lines(self.shipping_address)


def activity_model() -> Any:
    """The sale's model (``seckill.Activity``), reached through the order's foreign key:
    orders sits below seckill in the layers and never imports it. Typed ``Any``: its
    manager, fields and ``Status`` are seckill's."""
    return Order._meta.get_field("activity").related_model


# Where the shop delivers: mainland China and the usual destinations abroad.
COUNTRIES = [
    ("CN", _("China (mainland)")),
    ("HK", _("Hong Kong SAR")),
    ("MO", _("Macao SAR")),
    ("TW", _("Taiwan region")),
    ("SG", _("Singapore")),
    ("MY", _("Malaysia")),
    ("TH", _("Thailand")),
    ("VN", _("Vietnam")),
    ("JP", _("Japan")),
    ("KR", _("South Korea")),
    ("AU", _("Australia")),
    ("NZ", _("New Zealand")),
    ("US", _("United States")),
    ("CA", _("Canada")),
    ("GB", _("United Kingdom")),
    ("DE", _("Germany")),
    ("FR", _("France")),
    ("IT", _("Italy")),
    ("ES", _("Spain")),
    ("NL", _("Netherlands")),
    ("AE", _("United Arab Emirates")),
]
# No postal codes there.
COUNTRIES_WITHOUT_POSTAL_CODE = {"HK", "MO", "AE"}
# Joiners are part of some scripts and emoji; every other format or control character is not text.
_JOINERS = {"\u200c", "\u200d"}


def validate_plain_text(value: str) -> None:
    """One line of text: no control, format (bar joiners), surrogate or unassigned characters."""
    for char in value:
        if unicodedata.category(char).startswith("C") and char not in _JOINERS:
            raise ValidationError(_("Use letters, digits and punctuation only (no control characters)."))


def validate_phone(value: str) -> None:
    if not re.fullmatch(r"\+?[0-9][0-9 ()-]*[0-9]", value) or not 5 <= sum(c.isdigit() for c in value) <= 15:
        raise ValidationError(_("Enter a phone number: 5 to 15 digits, optionally with +, spaces or dashes."))


class ShippingAddress(models.Model):
    """Where a shopper's orders go, one per shopper, edited by the shopper. An order keeps
    its own copy, taken when payment starts (Order.shipping_address)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="shipping_address")
    recipient = models.CharField(_("recipient"), max_length=60, validators=[validate_plain_text])
    phone = models.CharField(_("phone"), max_length=20, validators=[validate_phone])
    country = models.CharField(_("country or region"), max_length=2, choices=COUNTRIES, default="CN")
    region = models.CharField(_("province or state"), max_length=60, blank=True, validators=[validate_plain_text])
    city = models.CharField(_("city"), max_length=60, validators=[validate_plain_text])
    line1 = models.CharField(_("address"), max_length=120, validators=[validate_plain_text])
    line2 = models.CharField(_("address (line 2)"), max_length=120, blank=True, validators=[validate_plain_text])
    postal_code = models.CharField(_("postal code"), max_length=12, blank=True, validators=[validate_plain_text])
    updated_at = models.DateTimeField(auto_now=True)

    SNAPSHOT_FIELDS = ("recipient", "phone", "country", "region", "city", "line1", "line2", "postal_code")

    class Meta:
        verbose_name = _("shipping address")
        verbose_name_plural = _("shipping addresses")

    def __str__(self) -> str:
        return f"{self.recipient}, {self.city}"

    def clean(self) -> None:
        code = self.postal_code.strip().upper()
        if self.country == "CN" and not re.fullmatch(r"[0-9]{6}", code):
            raise ValidationError({"postal_code": _("A postal code in mainland China has 6 digits.")})
        if self.country not in COUNTRIES_WITHOUT_POSTAL_CODE and not code:
            raise ValidationError({"postal_code": _("Enter the postal code.")})
        if code and not re.fullmatch(r"[A-Z0-9][A-Z0-9 -]{1,10}", code):
            raise ValidationError({"postal_code": _("Use letters, digits, spaces and dashes only.")})
        self.postal_code = code

    def snapshot(self) -> dict[str, str]:
        return {field: getattr(self, field) for field in self.SNAPSHOT_FIELDS}


def address_lines(snapshot: dict | None) -> list[str]:
    """An address (a snapshot) as the lines of a label: recipient and phone, street, city, country."""
    if not snapshot:
        return []
    country = dict(COUNTRIES).get(snapshot.get("country", ""), snapshot.get("country", ""))
    city = " ".join(p for p in (snapshot.get("postal_code", ""), snapshot.get("city", "")) if p)
    lines = [
        f"{snapshot.get('recipient', '')} · {snapshot.get('phone', '')}",
        snapshot.get("line1", ""),
        snapshot.get("line2", ""),
        ", ".join(p for p in (city, snapshot.get("region", "")) if p),
        str(country),
    ]
    return [line for line in lines if line]


class ReleasedReservation(models.Model):
    """A reservation given back without an order (the database guard said no, the shopper
    already had one, the replay gave up, staff returned it): its units went back on sale in
    Redis (or, when the guard found none, left Redis's count), so it must never become an
    order as well. Recorded before the Redis release, under
    the stock row's lock, so a late or concurrent consumer of the same reservation finds
    it (``orders.services.creation.reservation_give_up``)."""

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
        DB_GUARD_FAILED = "db_guard_failed", _("reserved, but the shop's records had no unit left")
        DUPLICATE_RESERVATION = "duplicate_reservation", _("reservation for a shopper who already has an order")
        REPLAY_EXHAUSTED = "replay_exhausted", _("reservation could not become an order")
        PAID_NOT_DEDUCTED = "paid_not_deducted", _("paid order without a stock deduction")
        ORDER_NOT_DEDUCTED = "order_not_deducted", _("pending order without a stock deduction")
        DRIFT = "drift", _("units not accounted for, cause unknown")

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
    """One reconciliation run: what it measured, found and did (seckill.sale.reconciliation)."""

    activity = models.ForeignKey("seckill.Activity", on_delete=models.CASCADE, related_name="reconciliation_reports")
    created_at = models.DateTimeField(auto_now_add=True)
    identity_ok = models.BooleanField()
    final = models.BooleanField(default=False, help_text=_("the last check, made when the sale closed"))
    anomalies_opened = models.PositiveIntegerField(default=0)
    actions_taken = models.PositiveIntegerField(default=0)
    report = models.JSONField()

    class Meta:
        verbose_name = _("stock check report")
        verbose_name_plural = _("stock check reports")
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["activity", "created_at"])]

    def __str__(self) -> str:
        return f"stock check of sale {self.activity_id} at {shop_time(self.created_at)}"


class ReconciliationSummary(models.Model):
    """The latest run of each activity's reconciliation: a quiet run (nothing found, done or
    opened) stores no report, only this row."""

    activity = models.OneToOneField("seckill.Activity", on_delete=models.CASCADE, related_name="reconciliation_summary")
    last_checked_at = models.DateTimeField()
    last_identity_ok = models.BooleanField()
    runs = models.PositiveIntegerField(default=0, help_text=_("every check, whether it found something or not"))
    quiet_runs_since_report = models.PositiveIntegerField(default=0)
    last_report = models.ForeignKey(
        ReconciliationReport, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The latest run's report (the dict reconcile returns): the figures of a quiet run.
    latest = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"stock checks of sale {self.activity_id}"


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
        return self._back_to_shop(f"{reverse('my-orders')}?failed={self.order.order_no}")

    def get_success_url(self) -> str:
        return self._back_to_shop(f"{reverse('my-orders')}?paid={self.order.order_no}")

    def _back_to_shop(self, path: str) -> str:
        # A real provider sends the shopper back from its own site, to the shop's public
        # address (PAYMENT_HOST); the simulated provider's page is on the shop itself.
        return path if self.variant == "simulated" else urljoin(get_base_url(), path)
