"""What the merchant's admin shows of a sale (reads only): its status in plain words and
the live view's figures (sold, remaining, pace, revenue, orders by state, the sale's
refused purchases, anomalies). Every figure is read from what exists: the database, the Redis
stock keys and the purchase counters; nothing here counts or writes."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import redis
from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone
from prometheus_client import multiprocess

from core.metrics import PURCHASES
from inventory.models import SeckillStock
from orders.models import AnomalyOrder, Order, ReconciliationReport, ReconciliationSummary
from seckill.models import Activity
from seckill.sale.selectors import units_left_many
from stock.breaker import redis_away
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

logger = logging.getLogger(__name__)


class SaleStatus:
    """The one status word of a sale in the admin."""

    SCHEDULED = "scheduled"
    WARMING = "ready to open"
    LIVE = "live"
    SOLD_OUT = "sold out"
    ENDED = "ended"

    HELP = {
        SCHEDULED: "Not started; the stock is loaded shortly before the start.",
        WARMING: "Stock loaded; the sale opens at its start.",
        LIVE: "On sale now.",
        SOLD_OUT: "On sale, nothing left: units come back if an order is cancelled or not paid.",
        ENDED: "Over: no more purchases.",
    }


def sale_status(*, activity: Activity, remaining: int | None, now: datetime | None = None) -> str:
    """``remaining``: the units the shop shows as left (None: not loaded or unknown)."""
    phase = activity.phase_at(now)
    if phase == Activity.Phase.ENDED:
        return SaleStatus.ENDED
    if phase == Activity.Phase.UPCOMING:
        return SaleStatus.WARMING if activity.status == Activity.Status.WARMED else SaleStatus.SCHEDULED
    return SaleStatus.SOLD_OUT if remaining == 0 else SaleStatus.LIVE


def sale_statuses(activities: list[Activity], now: datetime | None = None) -> tuple[dict[int, str], dict]:
    """Each activity's status and remaining units, with one Redis round trip for the page."""
    remaining = shown_remaining([a.pk for a in activities])
    now = now or timezone.now()
    return {a.pk: sale_status(activity=a, remaining=remaining.get(a.pk), now=now) for a in activities}, remaining


def shown_remaining(activity_ids: list[int]) -> dict[int, int | None]:
    try:
        return units_left_many(activity_ids)
    except redis.RedisError:
        return dict.fromkeys(activity_ids)


# --- the live view ---------------------------------------------------------------------

PACE_WINDOW = timedelta(minutes=5)  # the pace behind "sells out in about ..."
MINUTES_SHOWN = 10  # orders per minute: the last ten minutes


@dataclass(frozen=True)
class Refusals:
    """Purchase answers that sold nothing, by code: one sale's (the counters carry the
    sale), or the whole shop's; added up over the web processes when they share a metrics
    directory."""

    by_code: dict[str, int]
    shared: bool  # False: this process's own count only

    @property
    def total(self) -> int:
        return sum(self.by_code.values())


def purchase_refusals(activity_id: int | None = None) -> Refusals:
    """The refusals of the sale ``activity_id``; of every sale when None."""
    counts: dict[str, float] = {}
    sale = None if activity_id is None else str(activity_id)
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        metrics = multiprocess.MultiProcessCollector(None, path=directory).collect()
    else:
        metrics = PURCHASES.collect()
    for metric in metrics:
        if metric.name != "seckill_purchase":
            continue
        for sample in metric.samples:
            labels = sample.labels
            if not sample.name.endswith("_total") or labels.get("code") == "queued":
                continue
            if sale is None or labels.get("activity") == sale:
                code = labels.get("code", "?")
                counts[code] = counts.get(code, 0) + sample.value
    return Refusals(
        by_code={code: int(value) for code, value in sorted(counts.items(), key=lambda item: -item[1]) if value},
        shared=bool(directory),
    )


def _reserved_not_ordered(activity: Activity) -> int | None:
    """Units reserved in Redis whose orders are not written yet (the logs' lengths)."""
    if redis_away():
        return None
    pipe = stock_redis().pipeline(transaction=False)
    for keys in ActivityKeys(activity.pk).shards(activity.shards):
        pipe.xlen(keys.log)
    try:
        return sum(pipe.execute())
    except redis.RedisError:
        return None


def _duration_words(seconds: float) -> str:
    total = max(0, round(seconds))
    if total < 60:
        return f"{total} s"
    minutes, seconds = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def live_figures(*, activity: Activity, now: datetime | None = None) -> dict:
    """The live view's figures of one sale, ready for JSON (numbers and plain words)."""
    now = now or timezone.now()
    remaining = shown_remaining([activity.pk]).get(activity.pk)
    status = sale_status(activity=activity, remaining=remaining, now=now)
    orders = Order.objects.filter(activity=activity)
    counts = orders.aggregate(
        pending=Count("id", filter=Q(status=Order.Status.PENDING)),
        paid=Count("id", filter=Q(status=Order.Status.PAID)),
        cancelled=Count("id", filter=Q(status=Order.Status.CANCELLED)),
        pending_units=Sum("quantity", filter=Q(status=Order.Status.PENDING), default=0),
        paid_units=Sum("quantity", filter=Q(status=Order.Status.PAID), default=0),
        revenue=Sum("amount", filter=Q(status=Order.Status.PAID), default=Decimal("0")),
        expected=Sum("amount", filter=Q(status=Order.Status.PENDING), default=Decimal("0")),
        last_order=Max("created_at"),
    )
    unordered = _reserved_not_ordered(activity) if status in (SaleStatus.LIVE, SaleStatus.SOLD_OUT) else 0
    sold = counts["pending_units"] + counts["paid_units"] + (unordered or 0)
    if remaining is None:
        stock = SeckillStock.objects.filter(activity=activity).first()
        left = stock.available if stock is not None and status != SaleStatus.ENDED else None
        left_source = "database" if left is not None else None
    else:
        left, left_source = remaining, "live"
    per_minute = _orders_per_minute(orders, now)
    return {
        "id": activity.pk,
        "title": activity.title,
        "status": status,
        "status_help": SaleStatus.HELP[status],
        "now": now.isoformat(),
        "start_at": activity.start_at.isoformat(),
        "end_at": activity.end_at.isoformat(),
        "total": activity.total_stock,
        "sold": min(sold, activity.total_stock),
        "left": left,
        "left_source": left_source,
        "reserved_not_ordered": unordered,
        "orders": {
            "paid": counts["paid"],
            "pending": counts["pending"],
            "cancelled": counts["cancelled"],
            "paid_units": counts["paid_units"],
            "pending_units": counts["pending_units"],
        },
        "revenue": str(counts["revenue"]),
        "awaiting_payment": str(counts["expected"]),
        "orders_per_minute": per_minute,
        "orders_last_minute": orders.filter(created_at__gt=now - timedelta(minutes=1), created_at__lte=now).count(),
        "orders_peak": max([m["orders"] for m in per_minute] + [1]),
        "sell_out": _sell_out(activity=activity, status=status, left=left, last_order=counts["last_order"], now=now),
        "refusals": _refusals_dict(activity.pk),
        "anomalies": _anomalies(activity),
    }


def _orders_per_minute(orders, now: datetime) -> list[dict]:
    """Orders created in each of the last MINUTES_SHOWN clock minutes (the current one so
    far), oldest first: counted by the database, however many orders a flood made."""
    current = now.replace(second=0, microsecond=0)
    first = current - timedelta(minutes=MINUTES_SHOWN - 1)
    counted = dict(
        orders.filter(created_at__gte=first, created_at__lte=now)
        .annotate(minute=TruncMinute("created_at", tzinfo=UTC))
        .values("minute")
        .annotate(n=Count("id"))
        .values_list("minute", "n")
    )
    minutes = [first + timedelta(minutes=i) for i in range(MINUTES_SHOWN)]
    return [{"minute": f"{timezone.localtime(m):%H:%M}", "orders": counted.get(m, 0)} for m in minutes]


def _sell_out(*, activity: Activity, status: str, left: int | None, last_order, now: datetime) -> str:
    if status in (SaleStatus.SCHEDULED, SaleStatus.WARMING):
        return "not started"
    if left == 0:
        if last_order is None:
            return "sold out"
        return f"sold out {_duration_words((last_order - activity.start_at).total_seconds())} after the start"
    if status == SaleStatus.ENDED:
        return "ended with units left" if left else "ended"
    if left is None:
        return "unknown (the stock is not loaded)"
    recent = Order.objects.filter(activity=activity, created_at__gt=now - PACE_WINDOW).aggregate(
        units=Sum("quantity", default=0)
    )["units"]
    if not recent:
        return "no orders in the last 5 minutes"
    seconds = left / (recent / PACE_WINDOW.total_seconds())
    if now + timedelta(seconds=seconds) > activity.end_at:
        return "at this pace, not before the end"
    return f"at this pace, in about {_duration_words(seconds)}"


# The answers' codes as a merchant reads them on the live view (the JSON keeps the codes too).
REFUSAL_WORDS = {
    "sold_out": "sold out",
    "duplicate": "already bought",
    "rate_limited": "too many tries, slowed down",
    "busy": "shop busy, asked to retry",
    "outcome_unknown": "Redis's reply lost, shopper asked to check",
    "not_authenticated": "not signed in",
    "authentication_failed": "sign-in not recognised",
    "invalid_request": "request not understood",
    "not_started": "before the start",
    "ended": "after the end",
    "bad_token": "outdated sale page",
    "not_found": "no such sale",
    "blacklisted": "blocked shopper",
    "not_eligible": "shopper not eligible",
    "captcha_required": "puzzle not answered",
    "captcha_invalid": "puzzle answered wrong",
    "ticket_required": "not let in from the waiting room",
    "ticket_invalid": "waiting-room pass not valid",
    "ticket_not_yours": "someone else's waiting-room pass",
    "ticket_expired": "waiting-room pass expired",
    "ticket_used": "waiting-room pass already used",
    "csrf_failed": "page expired, reload needed",
}


def _refusals_dict(activity_id: int) -> dict:
    try:
        refusals = purchase_refusals(activity_id)
    except Exception as exc:  # a figure missing, never the page
        logger.warning("purchase counters unreadable: %s", exc)
        return {"total": None, "by_code": {}, "by_reason": {}, "shared": False}
    by_reason: dict[str, int] = {}
    for code, n in refusals.by_code.items():
        words = REFUSAL_WORDS.get(code, code.replace("_", " "))
        by_reason[words] = by_reason.get(words, 0) + n
    return {"total": refusals.total, "by_code": refusals.by_code, "by_reason": by_reason, "shared": refusals.shared}


def _anomalies(activity: Activity) -> dict:
    open_ = AnomalyOrder.objects.filter(activity=activity, status=AnomalyOrder.Status.OPEN)
    labels = dict(AnomalyOrder.Kind.choices)
    by_kind = {
        str(labels.get(kind, kind)): n
        for kind, n in open_.values_list("kind").annotate(n=Count("id")).order_by("-n").values_list("kind", "n")
    }
    # The latest check, quiet ones included (they store no report, only the summary).
    summary = ReconciliationSummary.objects.filter(activity=activity).first()
    check = None
    if summary is not None:
        check = {
            "at": summary.last_checked_at.isoformat(),
            "stock_agrees": bool(summary.last_identity_ok),
            "redis_drift": (summary.latest or {}).get("redis_drift") or 0,
            "db_drift": (summary.latest or {}).get("db_drift") or 0,
        }
    else:
        latest = ReconciliationReport.objects.filter(activity=activity).order_by("-created_at").first()
        if latest is not None:
            check = {
                "at": latest.created_at.isoformat(),
                "stock_agrees": bool(latest.identity_ok),
                "redis_drift": latest.report.get("redis_drift") or 0,
                "db_drift": latest.report.get("db_drift") or 0,
            }
    return {"open": sum(by_kind.values()), "by_kind": by_kind, "last_check": check}
