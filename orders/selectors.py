"""Reads: a shopper's own order; for staff, which sales and orders they may see, the
evidence behind an anomaly and the figures of an activity's report."""

from datetime import UTC, datetime, timedelta
from typing import TypeVar

import redis
from django.contrib.auth.models import AbstractUser, AnonymousUser
from django.db.models import Count, Max, Min, Model, Q, QuerySet, Sum
from django.db.models.functions import TruncHour, TruncMinute, TruncSecond
from django.utils.timezone import localtime

from inventory.models import SeckillStock, StockMovement
from stock.keys import ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import LogEntry, parse_log_entry

from .models import AnomalyOrder, Order, ReconciliationReport, ReconciliationSummary, ShippingAddress

SaleModel = TypeVar("SaleModel", bound=Model)

# --- who sees which sale (staff, in the admin) --------------------------------------------
# The one rule behind every admin list, page, filter, search, autocomplete, action, export,
# live view and report that shows a sale or a row of one. It lives here rather than in
# seckill because the orders admin (and, through the sale's admin, the stock admin) sit
# below the sale in the layers and apply it too.

VIEW_ALL_SALES = "seckill.view_all_sales"


def sees_every_sale(user: AbstractUser | AnonymousUser) -> bool:
    """Superusers and holders of ``seckill.view_all_sales`` (the reviewers) see every sale;
    anyone else only the sales they own (an inactive account: none)."""
    return user.has_perm(VIEW_ALL_SALES)


def sales_visible_filter(user: AbstractUser | AnonymousUser, *, via: str = "") -> Q:
    """The rows ``user`` may see, as a filter. ``via``: the path from the rows to their sale
    ("" for activities, "activity__" for orders, stock rows, anomalies and reports)."""
    if sees_every_sale(user):
        return Q()
    if not user.is_authenticated or not user.is_active:
        return Q(pk__in=[])
    return Q(**{f"{via}owner": user.pk})


def sales_visible_to(*, user: AbstractUser | AnonymousUser, sales: type[SaleModel]) -> QuerySet[SaleModel]:
    """The sales ``user`` may see. ``sales``: the sale's model, which orders reaches
    through a foreign key (``field.related_model``, ``models.activity_model()``), never
    by an import: orders sits below the sale in the layers."""
    return sales._default_manager.filter(sales_visible_filter(user))


def orders_visible_to(*, user: AbstractUser | AnonymousUser) -> QuerySet[Order]:
    return Order.objects.filter(sales_visible_filter(user, via="activity__"))


def order_of_shopper(*, order_no: str, user_id: int) -> Order | None:
    """The shopper's order of that number; None for someone else's and for a number no
    order can have (from a URL: a NUL byte, which PostgreSQL text cannot hold, would
    otherwise fail the query with a 500)."""
    max_length = Order._meta.get_field("order_no").max_length
    if "\x00" in order_no or (max_length is not None and len(order_no) > max_length):
        return None
    return Order.objects.filter(order_no=order_no, user_id=user_id).first()


def address_of(*, user_id: int) -> ShippingAddress | None:
    return ShippingAddress.objects.filter(user_id=user_id).first()


def orders_of_shopper(*, user_id: int, limit: int = 100) -> list[Order]:
    """The shopper's newest orders with their sale, product and payments."""
    return list(
        Order.objects.filter(user_id=user_id)
        .select_related("activity__product")
        .prefetch_related("payments")
        .order_by("-created_at", "-id")[:limit]
    )


def order_page_of_shopper(*, order_no: str, user_id: int) -> Order | None:
    order = order_of_shopper(order_no=order_no, user_id=user_id)
    if order is None:
        return None
    return Order.objects.select_related("activity__product").prefetch_related("payments").filter(pk=order.pk).first()


def order_timeline(*, order: Order) -> list[dict]:
    """What happened to the order, oldest first, from its fields and payment records:
    reserved (the reservation's log id is its time in ms), ordered, payment started,
    paid, refunded, cancelled."""
    events: list[dict] = []
    reserved = _reservation_time(order.reservation_id)
    if reserved is not None:
        events.append({"kind": "reserved", "at": reserved})
    events.append({"kind": "ordered", "at": order.created_at})
    payments = sorted(order.payments.all(), key=lambda p: (p.created, p.pk))
    for payment in payments:
        events.append({"kind": "payment_started", "at": payment.created, "payment": payment})
        if payment.refund_reason or payment.status == "refunded":
            events.append({"kind": "refunded", "at": payment.settled_at or payment.modified, "payment": payment})
    if order.paid_at:
        events.append({"kind": "paid", "at": order.paid_at})
    if order.cancelled_at:
        events.append({"kind": "cancelled", "at": order.cancelled_at, "reason": order.cancel_reason})
    events.sort(key=lambda e: e["at"])
    return events


def _reservation_time(reservation_id: str):
    """A Redis stream id "<ms>-<seq>" read as a time; None for any other id."""
    head = reservation_id.split("-", 1)[0]
    if not head.isdigit() or len(head) > 15:
        return None
    return datetime.fromtimestamp(int(head) / 1000, tz=UTC)


FULFILMENT_COLUMNS = [
    "order_no",
    "status",
    "paid_at",
    "product",
    "sale",
    "quantity",
    "amount",
    "shopper",
    "recipient",
    "phone",
    "country",
    "region",
    "city",
    "line1",
    "line2",
    "postal_code",
]


def _cell(value) -> str:
    text = "" if value is None else str(value)
    # A spreadsheet runs a cell that starts like a formula: a shopper's "=HYPERLINK(…)" stays text.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def orders_fulfilment_rows(*, order_ids) -> list[list[str]]:
    """The fulfilment CSV of those orders (header first), each with its address copy."""
    orders = (
        Order.objects.filter(pk__in=order_ids)
        .select_related("activity__product", "user")
        .order_by("activity_id", "paid_at", "id")
    )
    rows = [FULFILMENT_COLUMNS]
    for order in orders.iterator(chunk_size=500):
        address = order.shipping_address or {}
        values = {
            "order_no": order.order_no,
            "status": order.status,
            "paid_at": localtime(order.paid_at).isoformat() if order.paid_at else "",  # the shop's offset
            "product": order.activity.product.name,
            "sale": order.activity.title,
            "quantity": order.quantity,
            "amount": order.amount,
            "shopper": order.user.get_username(),
            **{field: address.get(field, "") for field in ShippingAddress.SNAPSHOT_FIELDS},
        }
        rows.append([_cell(values[column]) for column in FULFILMENT_COLUMNS])
    return rows


def reservation_entry(*, activity_id: int, reservation_id: str, shard: int = 0) -> LogEntry | None:
    """The reservation's entry in its shard's Redis log, if it is still there (no order yet)."""
    try:
        log = ActivityKeys(activity_id).shard(shard).log
        entries = stock_redis().xrange(log, min=reservation_id, max=reservation_id)
    except redis.ResponseError:  # not a stream id (e.g. a staff-made reservation id)
        return None
    return parse_log_entry(*entries[0]) if entries else None


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def anomaly_evidence(*, anomaly: AnomalyOrder) -> dict:
    """What staff need to judge an anomaly: the Redis state of its shopper and
    reservation, its order and that order's ledger entries."""
    order, shard = anomaly.order, anomaly.shard
    if order is None and anomaly.reservation_id:
        order = Order.objects.filter(
            activity_id=anomaly.activity_id, shard=shard, reservation_id=anomaly.reservation_id
        ).first()
    keys = ActivityKeys(anomaly.activity_id).shard(shard)
    users = StockLayout(anomaly.activity_id, anomaly.activity.shards).users_of(anomaly.user_id or 0)
    try:
        client = stock_redis()
        pipe = client.pipeline(transaction=False)
        pipe.get(keys.stock)
        pipe.get(keys.loaded)
        pipe.hget(users.users, anomaly.user_id or 0)
        pipe.hget(users.failed, anomaly.user_id or 0)
        pipe.hget(keys.attempts, anomaly.reservation_id or "-")
        pipe.sismember(keys.returned, order.order_no if order else "-")
        pipe.xlen(keys.log)
        stock, loaded, participant, failed, attempts, returned, log_length = pipe.execute()
        entry = (
            reservation_entry(activity_id=anomaly.activity_id, reservation_id=anomaly.reservation_id, shard=shard)
            if anomaly.reservation_id
            else None
        )
        redis_state = {
            "shard": shard,
            "stock remaining": _text(stock),
            "stock loaded": _text(loaded),
            "shopper's live reservation": _text(participant),
            "shopper's failure reason": _text(failed),
            "reservation still in the log": bool(entry),
            "replay attempts": _text(attempts),
            "order's units returned to Redis": bool(returned) if order else None,
            "reservations in the log": log_length,
        }
    except redis.RedisError as exc:
        redis_state = {"error": f"the live counter is out of reach: {exc}"}
    ledger = list(StockMovement.objects.filter(order=order).order_by("id")) if order else []
    return {"redis": redis_state, "order": order, "ledger": ledger}


def _trunc_for(span: timedelta):
    if span <= timedelta(minutes=10):
        return TruncSecond
    if span <= timedelta(days=1):
        return TruncMinute
    return TruncHour


def _cumulative(rows) -> list[tuple]:
    total, points = 0, []
    for moment, units in rows:
        total += units
        points.append((moment, total))
    return points


def activity_report_data(*, activity) -> dict:
    """Sold over time, remaining and drift for an activity's report page."""
    orders = Order.objects.filter(activity=activity)
    span = orders.aggregate(first=Min("created_at"), last=Max("created_at"))
    trunc = _trunc_for(span["last"] - span["first"] if span["first"] else timedelta(0))

    def series(field: str, **filters) -> list[tuple]:
        rows = (
            orders.filter(**filters, **{f"{field}__isnull": False})
            .annotate(t=trunc(field))
            .values("t")
            .annotate(units=Sum("quantity"))
            .order_by("t")
            .values_list("t", "units")
        )
        return _cumulative(rows)

    recent = ReconciliationReport.objects.filter(activity=activity).order_by("-created_at")
    reports = list(recent.values_list("created_at", "report")[:500])[::-1]
    stock = SeckillStock.objects.filter(activity=activity).first()
    counts = orders.aggregate(
        pending=Sum("quantity", filter=Q(status=Order.Status.PENDING), default=0),
        paid=Sum("quantity", filter=Q(status=Order.Status.PAID), default=0),
        cancelled=Sum("quantity", filter=Q(status=Order.Status.CANCELLED), default=0),
        orders=Count("id"),
    )
    # Quiet runs store no report: the summary holds the latest run's figures.
    summary = ReconciliationSummary.objects.filter(activity=activity).select_related("last_report").first()
    latest = summary.latest if summary and summary.latest else (reports[-1][1] if reports else None)
    stored_reports = len(reports)
    if summary and summary.latest and (not reports or reports[-1][0] < summary.last_checked_at):
        reports.append((summary.last_checked_at, summary.latest))
    return {
        "summary": summary,
        "ordered": series("created_at"),
        "paid": series("paid_at", status=Order.Status.PAID),
        "cancelled": series("cancelled_at", status=Order.Status.CANCELLED),
        "remaining": [(t, r.get("redis_remaining")) for t, r in reports if r.get("redis_remaining") is not None],
        "db_available": [(t, r.get("db_available")) for t, r in reports],
        "redis_drift": [(t, r.get("redis_drift") or 0) for t, r in reports],
        "db_drift": [(t, r.get("db_drift") or 0) for t, r in reports],
        "figures": {
            "total stock": activity.total_stock,
            "units paid": counts["paid"],
            "units pending payment": counts["pending"],
            "units cancelled": counts["cancelled"],
            "orders": counts["orders"],
            "database available": stock.available if stock else None,
            "Redis remaining (last report)": latest.get("redis_remaining") if latest else None,
            "Redis drift (last report)": latest.get("redis_drift") if latest else None,
            "database drift (last report)": latest.get("db_drift") if latest else None,
            "identities hold (last report)": latest.get("identity_ok") if latest else None,
            "reports": stored_reports,
            "open anomalies": AnomalyOrder.objects.filter(activity=activity, status=AnomalyOrder.Status.OPEN).count(),
        },
    }
