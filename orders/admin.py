import csv
import json

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from core.clock import shop_time, zoned
from inventory.admin import ReadOnlyAdmin

from .charts import ACTION_WORDS, BUCKET_WORDS, activity_charts, html_table, identity_rows, report_in_words
from .models import AnomalyOrder, Order, ReconciliationReport, activity_model, address_lines
from .selectors import (
    activity_report_data,
    anomaly_evidence,
    orders_fulfilment_rows,
    orders_visible_to,
    sales_visible_filter,
    sales_visible_to,
)
from .services.anomaly_actions import AnomalyActionError, anomaly_act, anomaly_actions


class SaleFilter(admin.RelatedFieldListFilter):
    """The "activity" filter, listing only the sales the user sees (a merchant: their own)."""

    def field_choices(self, field, request, model_admin):
        sales = sales_visible_to(user=request.user, sales=field.related_model)
        return [(a.pk, str(a)) for a in sales.order_by("-start_at")]


class SaleRowsAdmin(admin.ModelAdmin):
    """Rows that belong to a sale (anomalies, reports): a user sees those of the sales they
    see; another merchant's row answers as a missing one."""

    def get_queryset(self, request):
        return super().get_queryset(request).filter(sales_visible_filter(request.user, via="activity__"))


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    """View only: a saved change form would write the whole row back, and could undo a
    payment or a cancel that happened while the page was open. Orders change through
    the services (pay, cancel, the anomaly actions). Merchants see the orders of their own
    sales with their shipping addresses and export them for fulfilment (CSV)."""

    # Short columns: the list fits a 1280 px window (the sale is in the filter on the right).
    list_display = [
        "order_no",
        "product",
        "shopper",
        "quantity",
        "amount",
        "status",
        "ship_to",
        "pay_by",
        "paid",
    ]
    list_filter = ["status", ("activity", SaleFilter)]
    search_fields = ["order_no", "user__username", "reservation_id"]
    list_select_related = ["activity__product", "user"]
    actions = ["export_for_fulfilment"]

    class Media:
        css = {"all": ["orders/order-list.css"]}

    # The shopper's account is not for merchants or reviewers to open: plain names, no links.
    fields = (
        "order_no",
        "product",
        "activity",
        "shopper",
        "quantity",
        "amount",
        "status",
        "cancel_reason",
        "address",
        "pay_by",
        "ordered",
        "paid",
        "cancelled",
        "stock_counter",
        "reservation_id",
    )
    readonly_fields = fields

    @admin.display(description=zoned("pay by"), ordering="pay_deadline")
    def pay_by(self, obj):
        return shop_time(obj.pay_deadline, seconds=False, label=False) if obj.status == Order.Status.PENDING else "–"

    @admin.display(description=zoned("paid"), ordering="paid_at")
    def paid(self, obj):
        return shop_time(obj.paid_at, seconds=False, label=False)

    @admin.display(description=zoned("ordered"), ordering="created_at")
    def ordered(self, obj):
        return shop_time(obj.created_at, label=False)

    @admin.display(description=zoned("cancelled"), ordering="cancelled_at")
    def cancelled(self, obj):
        return shop_time(obj.cancelled_at, label=False)

    @admin.display(description="stock counter")
    def stock_counter(self, obj):
        return counter_words(obj.shard)

    @admin.display(description="product", ordering="activity__product__name")
    def product(self, obj):
        return obj.activity.product.name

    @admin.display(description="shopper", ordering="user__username")
    def shopper(self, obj):
        return obj.user.get_username()

    @admin.display(description="ship to")
    def ship_to(self, obj):
        address = obj.shipping_address
        if not address:
            return "–"
        return f"{address.get('recipient', '')}, {address.get('city', '')}"

    @admin.display(description="shipping address (as paid)")
    def address(self, obj):
        lines = address_lines(obj.shipping_address)
        if not lines:
            return "none yet (copied when payment starts)"
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines))

    def get_queryset(self, request):
        # The orders of the sales this user sees: the list, its search and filters, the
        # pages, the export (its selection is taken from here), the autocomplete lists.
        return orders_visible_to(user=request.user)

    def has_export_permission(self, request):
        return request.user.has_perm("orders.export_order")

    @admin.action(description="Export selected orders for fulfilment (CSV)", permissions=["export"])
    def export_for_fulfilment(self, request, queryset):
        # Only what can be shipped: paid, with the address copied when payment started.
        shippable = queryset.filter(status=Order.Status.PAID, shipping_address__isnull=False).exclude(
            shipping_address={}
        )
        exported = shippable.count()
        skipped = queryset.count() - exported
        if not exported:
            self.message_user(
                request,
                f"Nothing exported: the {skipped} selected orders are not paid yet, or have no shipping address.",
                messages.WARNING,
            )
            return None  # back to the list
        note = f"; {skipped} skipped: not paid yet, or no shipping address" if skipped else ""
        self.message_user(request, f"{exported} orders exported{note}.", messages.SUCCESS)
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        stamp = timezone.localtime().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="orders-{stamp}.csv"'
        response.write("\ufeff")  # a BOM: spreadsheets then read the Chinese addresses as UTF-8
        csv.writer(response).writerows(orders_fulfilment_rows(order_ids=shippable.values("pk")))
        return response


# The report page's figures in a merchant's words (keys: orders.selectors.activity_report_data).
FIGURE_WORDS = {
    "total stock": "units for sale in all",
    "units paid": "units paid",
    "units pending payment": "units waiting for payment",
    "units cancelled": "units cancelled (back on sale)",
    "orders": "orders",
    "database available": "units left, as the shop's records count them",
    "Redis remaining (last report)": "units left, as the live counter counts them (last check)",
    "Redis drift (last report)": "units the live counter cannot account for (last check; 0 is right)",
    "database drift (last report)": "units the shop's records cannot account for (last check; 0 is right)",
    "identities hold (last report)": "every unit accounted for (last check)",
    "reports": "checks that found something",
    "open anomalies": "orders needing review",
}


def figures_in_words(figures: dict) -> dict:
    def shown(value):
        if isinstance(value, bool):
            return "yes" if value else "no"
        return value

    return {FIGURE_WORDS.get(name, name): shown(value) for name, value in figures.items()}


def counter_words(shard: int) -> str:
    """A stock counter as a person reads it: counted from 1 (the stock's parts count from 0)."""
    return f"counter {shard + 1}"


# The live counter's records of an anomaly (keys: orders.selectors.anomaly_evidence).
EVIDENCE_WORDS = {
    "shard": "stock counter",
    "stock remaining": "units left on the counter",
    "stock loaded": "units the counter was loaded with",
    "shopper's live reservation": "the shopper's reservation",
    "shopper's failure reason": "why the shopper's last try failed",
    "reservation still in the log": "reservation still waiting to become an order",
    "replay attempts": "tries to turn it into an order",
    "order's units returned to Redis": "the order's units back on the counter",
    "reservations in the log": "reservations waiting to become orders",
    "error": "not readable",
}
# The order's fields as the evidence shows them.
ORDER_WORDS = {
    "order_no": "order",
    "status": "status",
    "quantity": "quantity",
    "amount": "amount",
    "shard": "stock counter",
    "reservation_id": "reservation",
    "cancel_reason": "why cancelled",
    "pay_deadline": "pay by",
    "created_at": "ordered",
    "paid_at": "paid",
    "cancelled_at": "cancelled",
}


def _table(rows) -> str:
    return format_html(
        '<table class="evidence">{}</table>',
        format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", ((k, "–" if v is None else v) for k, v in rows)),
    )


# action: (button, what it does, message when done); offered per kind by anomaly_actions.
ANOMALY_ACTIONS = {
    "rederive": (
        "Recount the live counter",
        "sets the sale's live counter again from the shop's records, then checks the stock; "
        "the history shows the units left before and after",
        "live counter recounted",
    ),
    "recreate": (
        "Re-create the order",
        "reserves a unit for the shopper again and makes the order",
        "order re-created",
    ),
    "return": (
        "Return the stock",
        "cancels the anomaly's pending order or releases its reservation",
        "stock returned",
    ),
    "resolve": ("Resolve with note", "closes the anomaly and needs a note", "resolved"),
}
# The history's action names (orders.services.anomaly_actions) as the buttons say them.
HISTORY_WORDS = {
    "rederive_stock": ANOMALY_ACTIONS["rederive"][0],
    "recreate_order": ANOMALY_ACTIONS["recreate"][0],
    "return_stock": ANOMALY_ACTIONS["return"][0],
    "resolve": "Resolved",
}


@admin.register(AnomalyOrder)
class AnomalyOrderAdmin(SaleRowsAdmin):
    """Read-only evidence; staff act through the buttons that fit the anomaly's kind,
    each a service that records who did what and when (the history)."""

    list_display = ["id", "kind", "activity", "user", "order", "status", "found", "resolved_by"]
    list_filter = ["status", "kind", ("activity", SaleFilter)]
    search_fields = ["reservation_id", "user__username", "order__order_no"]
    list_select_related = ["activity", "user", "order", "resolved_by"]
    change_form_template = "admin/orders/anomalyorder/change_form.html"
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "kind",
                    "status",
                    "activity",
                    "shopper",
                    "order",
                    "stock_counter",
                    "reservation_id",
                    "found",
                ]
            },
        ),
        ("Evidence", {"fields": ["details_pretty", "counter_state", "order_state", "ledger"]}),
        ("Resolution", {"fields": ["resolution_note", "resolved_by_name", "resolved", "history_pretty"]}),
    ]

    def get_readonly_fields(self, request, obj=None):
        return [f for fields in (fs[1]["fields"] for fs in self.fieldsets) for f in fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        """Nothing is edited here: every change goes through an action (a service)."""

    def _evidence(self, obj):
        cache = getattr(self, "_evidence_cache", None)
        if cache is None or cache[0] != obj.pk:
            self._evidence_cache = cache = (obj.pk, anomaly_evidence(anomaly=obj))
        return cache[1]

    @admin.display(description=zoned("found"), ordering="created_at")
    def found(self, obj):
        return shop_time(obj.created_at, label=False)

    @admin.display(description=zoned("resolved"), ordering="resolved_at")
    def resolved(self, obj):
        return shop_time(obj.resolved_at, label=False)

    # Names, not links: the accounts' admin pages are not open to reviewers.
    @admin.display(description="shopper")
    def shopper(self, obj):
        return obj.user.get_username() if obj.user else "–"

    @admin.display(description="stock counter")
    def stock_counter(self, obj):
        return counter_words(obj.shard)

    @admin.display(description="resolved by")
    def resolved_by_name(self, obj):
        return obj.resolved_by.get_username() if obj.resolved_by else "–"

    @admin.display(description="details")
    def details_pretty(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.details, indent=2, default=str))

    @admin.display(description="the live counter's records")
    def counter_state(self, obj):
        records = self._evidence(obj)["redis"]
        shown = {**records, "shard": counter_words(records["shard"])} if "shard" in records else records
        return _table((EVIDENCE_WORDS.get(name, name), value) for name, value in shown.items())

    @admin.display(description="the order")
    def order_state(self, obj):
        order = self._evidence(obj)["order"]
        if order is None:
            return "no order"
        fields = ["order_no", "status", "quantity", "amount", "reservation_id", "cancel_reason"]
        times = ["pay_deadline", "created_at", "paid_at", "cancelled_at"]
        rows = [(ORDER_WORDS[f], getattr(order, f)) for f in fields] + [("stock counter", counter_words(order.shard))]
        return _table(rows + [(ORDER_WORDS[f], shop_time(getattr(order, f))) for f in times])

    @admin.display(description="ledger entries of the order")
    def ledger(self, obj):
        moves = self._evidence(obj)["ledger"]
        if not moves:
            return "none"
        return _table((f"#{m.pk} {shop_time(m.created_at)}", f"{m.kind} {m.quantity} ({m.reason})") for m in moves)

    @admin.display(description="history")
    def history_pretty(self, obj):
        if not obj.history:
            return "–"
        return format_html_join(
            "",
            "<div>{} — {} by {}: {} <em>{}</em></div>",
            (
                (
                    shop_time(h["at"]),
                    HISTORY_WORDS.get(h["action"], h["action"]),
                    h["by"],
                    h.get("result", ""),
                    h.get("note", ""),
                )
                for h in obj.history
            ),
        )

    def get_urls(self):
        return [
            path(
                "<path:object_id>/act/<str:action>/",
                self.admin_site.admin_view(self.act_view),
                name="orders_anomalyorder_act",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, object_id)
        offered = []
        if obj is not None and self.has_change_permission(request, obj):
            offered = [(a, *ANOMALY_ACTIONS[a][:2]) for a in anomaly_actions(anomaly=obj)]
        extra = {
            "can_act": bool(offered),
            "anomaly_actions": offered,
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, extra)

    def act_view(self, request, object_id, action):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        anomaly = get_object_or_404(self.get_queryset(request), pk=object_id)
        if not self.has_change_permission(request, anomaly) or action not in ANOMALY_ACTIONS:
            raise PermissionDenied
        try:
            anomaly_act(anomaly=anomaly, action=action, by=request.user, note=request.POST.get("note", ""))
        except AnomalyActionError as exc:
            self.message_user(request, f"Not done: {exc}", messages.ERROR)
        else:
            anomaly.refresh_from_db()
            result = anomaly.history[-1]["result"] if anomaly.history else ""
            self.message_user(
                request, f"Anomaly #{anomaly.pk}: {ANOMALY_ACTIONS[action][2]} ({result}).", messages.SUCCESS
            )
        return HttpResponseRedirect(reverse("admin:orders_anomalyorder_change", args=[anomaly.pk]))


class AccountedForFilter(admin.BooleanFieldListFilter):
    """The reports by whether every unit was accounted for (the field's name is the engine's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.title = "every unit accounted for"


@admin.register(ReconciliationReport)
class ReconciliationReportAdmin(SaleRowsAdmin, ReadOnlyAdmin):
    """The reconciliation runs that found, did or opened something (and each final run),
    read-only, problems first; plus the report page of an activity."""

    list_display = ["checked", "activity", "accounted_for", "stage", "actions_taken", "anomalies_opened", "page"]
    list_filter = [("identity_ok", AccountedForFilter), "final", ("activity", SaleFilter)]
    list_select_related = ["activity"]
    date_hierarchy = "created_at"
    # Problems first: units not accounted for, then anomalies opened, then newest.
    ordering = ["identity_ok", "-anomalies_opened", "-created_at", "-id"]
    # A tuple: both attributes take it (a list is typed for one only).
    fields = (
        "activity",
        "checked",
        "stage",
        "outcome",
        "identity_table",
        "bucket_table",
        "action_table",
    )
    readonly_fields = fields

    class Media:
        css = {"all": ["orders/report.css"]}

    @admin.display(description=zoned("checked"), ordering="created_at")
    def checked(self, obj):
        return shop_time(obj.created_at, label=False)

    @admin.display(description="every unit accounted for", ordering="identity_ok")
    def accounted_for(self, obj):
        if obj.report.get("consistent") is False:
            return "not measured (the sale kept moving)"
        if obj.identity_ok:
            return "yes"
        return format_html('<strong class="errornote-inline">{}</strong>', "no")

    @admin.display(description="run", ordering="final")
    def stage(self, obj):
        return "final check" if obj.final else "during the sale"

    @admin.display(description="in words")
    def outcome(self, obj):
        return report_in_words(obj.report)

    @admin.display(description="where the units are")
    def identity_table(self, obj):
        return html_table(("what must add up", "figures", "units off"), identity_rows(obj.report))

    @admin.display(description="found")
    def bucket_table(self, obj):
        report = obj.report
        found = report.get("found", {})
        buckets = report.get("buckets", {})
        rows = [
            (words, buckets[name], ", ".join(str(i) for i in found.get(name, [])) or "–")
            for name, words in BUCKET_WORDS.items()
            if name in buckets
        ]
        return html_table(("what", "how many", "examples"), rows)

    @admin.display(description="done")
    def action_table(self, obj):
        actions = obj.report.get("actions", {})
        rows = [(words, actions[name]) for name, words in ACTION_WORDS.items() if name in actions]
        return html_table(("action", "how many"), rows) if rows else "nothing (a check only)"

    @admin.display(description="activity report page")
    def page(self, obj):
        url = reverse("admin:orders_reconciliationreport_activity", args=[obj.activity_id])
        return format_html('<a href="{}">charts</a>', url)

    def get_urls(self):
        return [
            path(
                "activity/<int:activity_id>/",
                self.admin_site.admin_view(self.activity_view),
                name="orders_reconciliationreport_activity",
            ),
            *super().get_urls(),
        ]

    def may_see_activity_report(self, request) -> bool:
        """Reviewers (the reports) and merchants (the sales they run) see a sale's report."""
        return self.has_view_permission(request) or request.user.has_perm("seckill.view_activity")

    def activity_view(self, request, activity_id: int):
        if not self.may_see_activity_report(request):
            raise PermissionDenied
        # Another merchant's sale answers as a missing one.
        activity = get_object_or_404(sales_visible_to(user=request.user, sales=activity_model()), pk=activity_id)
        data = activity_report_data(activity=activity)
        summary = data["summary"]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Report: {activity}",
            "activity": activity,
            "window": " – ".join(
                (shop_time(activity.start_at, seconds=False, label=False), shop_time(activity.end_at, seconds=False))
            ),
            "figures": figures_in_words(data["figures"]),
            "summary": summary,
            "last_checked": shop_time(summary.last_checked_at) if summary else None,
            "last_report_at": shop_time(summary.last_report.created_at) if summary and summary.last_report else None,
            "charts": activity_charts(data),
            "opts": self.model._meta,
            "can_see_reports": self.has_view_permission(request),
        }
        return TemplateResponse(request, "admin/orders/activity_report.html", context)
