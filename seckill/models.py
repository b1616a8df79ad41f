from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


def default_pay_timeout() -> int:
    return settings.SECKILL_DEFAULT_PAY_TIMEOUT


class Activity(models.Model):
    """One flash sale: N units of a product at a seckill price from ``start_at``."""

    class Status(models.TextChoices):
        SCHEDULED = "scheduled", _("scheduled")  # created; stock not in Redis yet
        WARMED = "warmed", _("warmed")  # stock loaded into Redis
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
    shards = models.PositiveSmallIntegerField(_("stock shards"), default=1)
    safety_stock = models.PositiveIntegerField(
        _("safety stock"), default=0, help_text=_("Units held back from Redis for manual calibration after faults.")
    )
    pay_timeout = models.PositiveIntegerField(_("payment timeout (seconds)"), default=default_pay_timeout)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.SCHEDULED)
    # Created at the start by seckill.services.activity_token_ensure; null before.
    purchase_token = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001 - NULL = not started
    warmed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "activities"
        ordering = ["-start_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end_at__gt=models.F("start_at")), name="activity_ends_after_start"
            ),
            models.CheckConstraint(condition=models.Q(per_user_limit__gte=1), name="activity_per_user_limit_positive"),
            models.CheckConstraint(condition=models.Q(shards__gte=1), name="activity_shards_positive"),
            models.CheckConstraint(
                condition=models.Q(safety_stock__lte=models.F("total_stock")), name="activity_safety_within_total"
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
    def redis_loaded_units(self) -> int:
        """What warm-up loads into Redis: the total less the safety stock."""
        return self.total_stock - self.safety_stock


def activity_phase(*, status: str, start_at: datetime, end_at: datetime, now: datetime | None = None) -> str:
    """upcoming / live / ended: one definition for the model and the cached snapshot."""
    now = now or timezone.now()
    if status == Activity.Status.ENDED or now >= end_at:
        return Activity.Phase.ENDED
    if now < start_at:
        return Activity.Phase.UPCOMING
    return Activity.Phase.LIVE
