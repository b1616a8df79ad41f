import ipaddress
import re
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


def default_pay_timeout() -> int:
    return settings.SECKILL_DEFAULT_PAY_TIMEOUT


def default_db_reserve(total_stock: int) -> int:
    """The database reserve of an activity created without one: SECKILL_DB_RESERVE_PERCENT
    of its total, rounded down."""
    return total_stock * settings.SECKILL_DB_RESERVE_PERCENT // 100


# At least one request per window, and a window of at least one period: "0/s" would
# refuse everything and "10/0s" would limit nothing.
RATE_RE = re.compile(r"^0*[1-9]\d*/(0*[1-9]\d*)?[smhd]\Z")


def validate_rate(value: str) -> None:
    """A rate ("10/s", "100/5m": requests per fixed window, seckill.traffic.rate_parse) or "off"."""
    if value and value != "off" and not RATE_RE.match(value):
        raise ValidationError(_('Enter a rate such as "10/s" or "600/m", or "off".'))


class AdmissionMode(models.TextChoices):
    DIRECT = "direct", _("direct")
    ROOM = "room", _("waiting room")


class Activity(models.Model):
    """One flash sale: N units of a product at a seckill price from ``start_at``."""

    AdmissionMode = AdmissionMode

    class Status(models.TextChoices):
        SCHEDULED = "scheduled", _("scheduled")  # created; stock not in Redis yet
        WARMED = "warmed", _("stock loaded")  # stock loaded into Redis
        ENDED = "ended", _("ended")  # closed: final reconciliation done, Redis keys removed

    class Phase(models.TextChoices):
        UPCOMING = "upcoming", _("upcoming")
        LIVE = "live", _("live")
        ENDED = "ended", _("ended")

    title = models.CharField(_("title"), max_length=200)
    product = models.ForeignKey("inventory.Product", on_delete=models.PROTECT, related_name="activities")
    seckill_price = models.DecimalField(_("seckill price"), max_digits=10, decimal_places=2)
    start_at = models.DateTimeField(_("starts at"))
    end_at = models.DateTimeField(_("ends at"))
    total_stock = models.PositiveIntegerField(_("total stock"))
    per_user_limit = models.PositiveSmallIntegerField(_("per-user limit"), default=1)
    shards = models.PositiveSmallIntegerField(_("stock counters"), default=1)
    safety_stock = models.PositiveIntegerField(
        _("safety stock"), default=0, help_text=_("Units kept out of the sale, for corrections after a fault.")
    )
    # Escrow: units only the database path sells (while Redis is away); Redis never holds
    # them, so the two paths never own the same unit. Blank: filled in when saved.
    db_reserve = models.PositiveIntegerField(
        _("outage reserve"),
        null=True,
        blank=True,
        help_text=_(
            "Units sold only while the shop's fast stock counter is out of reach, so the sale goes on through "
            "an outage; the rest is never sold that way. Blank: the shop's default share of the total stock."
        ),
    )
    pay_timeout = models.PositiveIntegerField(_("payment timeout (seconds)"), default=default_pay_timeout)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.SCHEDULED)
    # Created at the start by seckill.sale.activities.activity_token_ensure; null before.
    purchase_token = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001 - NULL = not started
    warmed_at = models.DateTimeField(_("stock loaded at"), null=True, blank=True, editable=False)
    # The Redis state the last warm-up wrote (stock.identity.stock_identity): a different
    # one later means the stock was lost or rolled back, and is derived again.
    redis_identity = models.JSONField(default=dict, blank=True, editable=False)
    # Traffic gates (seckill.purchase.gates); blank = the SECKILL_* default from settings.
    rate_per_user = models.CharField(
        _("rate per user"),
        max_length=16,
        blank=True,
        validators=[validate_rate],
        help_text=_('Purchases one shopper may attempt, e.g. "5/s"; "off" disables; blank = SECKILL_RATE_PER_USER.'),
    )
    rate_per_ip = models.CharField(
        _("rate per IP"),
        max_length=16,
        blank=True,
        validators=[validate_rate],
        help_text=_(
            'Purchases one client address may attempt, e.g. "50/s"; "off" disables; blank = SECKILL_RATE_PER_IP.'
        ),
    )
    admission_rate = models.PositiveIntegerField(
        _("admission rate (per second)"),
        null=True,
        blank=True,
        help_text=_(
            "Purchases per second let through to the stock path, all shoppers together; 0 = no cap; "
            "blank = SECKILL_ADMISSION_RATE."
        ),
    )
    admission_burst = models.PositiveIntegerField(
        _("purchases let through at once"),
        null=True,
        blank=True,
        help_text=_("After a quiet moment, how many purchases may go through together; blank: one second's worth."),
    )
    min_member_level = models.PositiveSmallIntegerField(
        _("minimum membership level"),
        null=True,
        blank=True,
        help_text=_("Shoppers below this level get 403 not_eligible; blank = no rule."),
    )
    min_account_age_days = models.PositiveIntegerField(
        _("minimum account age (days)"),
        null=True,
        blank=True,
        help_text=_("Accounts younger than this get 403 not_eligible; blank = no rule."),
    )
    captcha_required = models.BooleanField(
        _("captcha required"), default=False, help_text=_("Each purchase must carry a one-time captcha answer.")
    )
    # The waiting room (seckill.room): "direct" is the purchase path as it always was.
    admission_mode = models.CharField(
        _("admission"),
        max_length=8,
        choices=AdmissionMode.choices,
        default=AdmissionMode.DIRECT,
        help_text=_(
            "Direct: shoppers buy as soon as the sale starts. Waiting room: they queue, are let in at the "
            "admission rate and buy with a ticket."
        ),
    )
    room_prequeue_minutes = models.PositiveIntegerField(
        _("pre-queue opens (minutes before the start)"),
        default=15,
        help_text=_("Everyone who joins in this time gets a random place at the start."),
    )
    room_rate = models.PositiveIntegerField(
        _("room admission rate (shoppers per second)"), default=20, validators=[MinValueValidator(1)]
    )
    room_cap = models.PositiveIntegerField(
        _("shoppers buying at the same time (waiting room)"),
        default=200,
        help_text=_("Shoppers let in from the waiting room who may be buying at once; 0: no limit."),
    )
    room_window_seconds = models.PositiveIntegerField(
        _("time to buy once let in (seconds)"), default=120, validators=[MinValueValidator(5)]
    )
    # The shuffle's seed, kept here once published (the room's Redis keys go at the close).
    room_seed = models.CharField(max_length=64, blank=True, editable=False)
    # The merchant who runs the sale: the admin shows a merchant only their own sales and
    # those sales' orders (the one rule: orders.selectors.sales_visible_filter). PROTECT,
    # not SET_NULL: a sale's orders, addresses and revenue keep a merchant answerable for them, so an
    # account that still owns sales is deactivated, or its sales handed to another merchant
    # by a superuser, before it can be deleted. Null: a sale made before owners were
    # recorded, or left to the shop; only staff who see every sale see it.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("merchant"),
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="sales_owned",
        help_text=_("The merchant who runs this sale; merchants see only their own sales."),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "activities"
        ordering = ["-start_at"]
        permissions = [("view_all_sales", "Can see every merchant's sales")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end_at__gt=models.F("start_at")), name="activity_ends_after_start"
            ),
            models.CheckConstraint(condition=models.Q(per_user_limit__gte=1), name="activity_per_user_limit_positive"),
            models.CheckConstraint(condition=models.Q(shards__gte=1), name="activity_shards_positive"),
            models.CheckConstraint(
                condition=models.Q(safety_stock__lte=models.F("total_stock")), name="activity_safety_within_total"
            ),
            models.CheckConstraint(
                condition=models.Q(db_reserve__lte=models.F("total_stock") - models.F("safety_stock"))
                | models.Q(db_reserve__isnull=True),
                name="activity_reserve_within_total",
            ),
        ]
        indexes = [models.Index(fields=["status", "start_at"])]

    def __str__(self) -> str:
        return self.title

    def phase_at(self, now: datetime | None = None) -> str:
        return activity_phase(status=self.status, start_at=self.start_at, end_at=self.end_at, now=now)

    @property
    def phase(self) -> str:
        return self.phase_at()

    @property
    def reserve_units(self) -> int:
        """The database reserve (escrow), once saved; 0 before."""
        return self.db_reserve or 0

    @property
    def redis_loaded_units(self) -> int:
        """What warm-up loads into Redis: the total less the safety stock and the reserve."""
        return self.total_stock - self.safety_stock - self.reserve_units


def activity_phase(*, status: str, start_at: datetime, end_at: datetime, now: datetime | None = None) -> str:
    """upcoming / live / ended: one definition for the model and the cached snapshot."""
    now = now or timezone.now()
    if status == Activity.Status.ENDED or now >= end_at:
        return Activity.Phase.ENDED
    if now < start_at:
        return Activity.Phase.UPCOMING
    return Activity.Phase.LIVE


class BlacklistEntry(models.Model):
    """A user, client address (or network) or device id that may not buy (403 blacklisted)."""

    class Kind(models.TextChoices):
        USER = "user", _("user id")
        IP = "ip", _("IP address or network")
        DEVICE = "device", _("device id")

    kind = models.CharField(max_length=8, choices=Kind.choices)
    value = models.CharField(max_length=128, help_text=_("User id, IP address / CIDR network, or device id."))
    reason = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text=_("Blank: until removed."))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "blacklist entries"
        constraints = [models.UniqueConstraint(fields=["kind", "value"], name="blacklist_kind_value_unique")]

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"

    def clean(self) -> None:
        self.value = self.value.strip()
        if self.kind == self.Kind.IP:
            try:
                self.value = str(ipaddress.ip_network(self.value, strict=False))
            except ValueError:
                raise ValidationError({"value": _("Enter an IP address or a CIDR network.")}) from None
        elif self.kind == self.Kind.USER and not self.value.isdigit():
            raise ValidationError({"value": _("Enter a user id (a number).")})


class ShopperProfile(models.Model):
    """What eligibility rules look at besides the account itself."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="shopper_profile")
    member_level = models.PositiveSmallIntegerField(_("membership level"), default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"profile of user {self.user_id}"
