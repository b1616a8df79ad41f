"""The sale's admin: its list, its change form and what saving and deleting do. The
actions live in actions.py, the sale's own pages and links in pages.py, the form's
words and locks in forms.py."""

from typing import cast

import redis
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Count, Field, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from inventory.models import SeckillStock, StockMovement
from inventory.services import InsufficientStock
from orders.models import Order, ReconciliationReport
from orders.selectors import sales_visible_filter, sees_every_sale
from seckill.admin.actions import ActivityActionsMixin
from seckill.admin.dashboard import SaleStatus, sale_status, sale_statuses
from seckill.admin.filters import SaleStatusFilter
from seckill.admin.forms import FORM_WORDS, LOCKED_SHOWN, ROOM_FIELDS, LockedFieldsForm, stored_activity
from seckill.admin.pages import ActivityPagesMixin, orders_url
from seckill.models import Activity
from seckill.room.status import room_figures
from seckill.sale.activities import (
    SHARDS_CHANGE_LEAD,
    ActivityChangeRefused,
    activity_locked_fields,
    activity_owner_set,
    activity_save,
)


class SeckillStockInline(admin.StackedInline):
    model = SeckillStock
    verbose_name = verbose_name_plural = "stock in the database"
    can_delete = False
    verbose_name_plural = "stock and its two shares"
    # A tuple: both attributes take it (a list is typed for one only).
    readonly_fields = ("total", "available", "redis_share", "reserve", "released", "version", "updated_at")
    fields = readonly_fields
    extra = 0

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="left for the normal sale (available − outage reserve)")
    def redis_share(self, obj):
        return obj.available - obj.reserve


@admin.register(Activity)
class ActivityAdmin(ActivityPagesMixin, ActivityActionsMixin, admin.ModelAdmin):
    # Explicit: the model's ordering is dropped by the counts' GROUP BY (autocomplete pages).
    ordering = ("-start_at", "-pk")
    list_display = [
        "title",
        "product",
        "price",
        "when",
        "status_badge",
        "stock_left",
        "orders_summary",
        "links",
    ]
    list_filter = [SaleStatusFilter]  # the dates: the date hierarchy above the list
    search_fields = ["title", "product__name"]
    date_hierarchy = "start_at"
    list_select_related = ["product", "owner"]
    autocomplete_fields = ["product"]
    # A tuple: also the "State" fieldset's fields (a list is typed for one only).
    readonly_fields = ("status", "warmed_at", "created_at", "updated_at")
    inlines = [SeckillStockInline]
    actions = ["warm_up", "force_rewarm", "end_and_clean_up", "publish", "duplicate", "pause_room", "resume_room"]
    change_form_template = "admin/seckill/activity/change_form.html"
    fieldsets = [
        (
            None,
            {
                "fields": ["title", "product", "owner", "seckill_price", "start_at", "end_at"],
                "description": (
                    "The start, the sale price and the stock fields are locked once the stock is loaded "
                    "or the sale has started: shoppers reserve and pay under them. The end may then move later, "
                    'never into the past (use "End now and clean up").'
                ),
            },
        ),
        (
            "Stock",
            {
                "fields": ["total_stock", "safety_stock", "db_reserve", "shards", "per_user_limit"],
                "description": (
                    "The reserve is sold only while the shop's fast stock counter is out of reach, and the rest "
                    "only through it: the two never sell the same unit. "
                    "Stock counters split the stock so that a very large crowd is served in parallel "
                    "(1 suits almost every sale). Their number can change until "
                    f"{int(SHARDS_CHANGE_LEAD.total_seconds())} seconds before the start, while no order exists "
                    "and the stock is not loaded."
                ),
            },
        ),
        ("Orders", {"fields": ["pay_timeout"]}),
        (
            "Traffic gates",
            {
                "fields": [
                    "rate_per_user",
                    "rate_per_ip",
                    "admission_rate",
                    "admission_burst",
                    "min_member_level",
                    "min_account_age_days",
                    "captcha_required",
                ],
                "description": "Leave a rate blank to use the shop's default for every sale.",
            },
        ),
        (
            "Waiting room",
            {
                "fields": [
                    "admission_mode",
                    "room_prequeue_minutes",
                    "room_rate",
                    "room_cap",
                    "room_window_seconds",
                    "room_figures_shown",
                ],
                "description": (
                    "With a waiting room, shoppers join a queue (from the pre-queue opening; those who join before "
                    "the start get random places, drawn from a seed published after it), are let in at the admission "
                    "rate and buy with a ticket within their time. The room closes when the stock is gone and "
                    "reopens if units come back. Pause and resume it from the actions menu."
                ),
            },
        ),
        ("State", {"fields": readonly_fields}),
    ]

    class Media:
        css = {"all": ["seckill/admin/admin.css"]}

    def get_queryset(self, request):
        # Every page, list, search, filter, action and autocomplete list of sales starts here.
        return (
            super()
            .get_queryset(request)
            .filter(sales_visible_filter(request.user))
            .annotate(
                pending_count=Count("orders", filter=Q(orders__status=Order.Status.PENDING)),
                paid_count=Count("orders", filter=Q(orders__status=Order.Status.PAID)),
            )
        )

    def sale_rows_filter(self, request, *, via: str) -> Q:
        """The rows of sales (stock rows, ledger entries) this user may see: the stock admin
        asks here, below the sale in the layers (``via``: the rows' path to their sale)."""
        return sales_visible_filter(request.user, via=via)

    def get_list_display(self, request):
        if sees_every_sale(request.user):  # a merchant's list holds their own sales only
            return [("product_and_merchant" if c == "product" else c) for c in self.list_display]
        return self.list_display

    def get_list_filter(self, request):
        if sees_every_sale(request.user):
            return [*self.list_filter, ("owner", admin.RelatedOnlyFieldListFilter)]
        return self.list_filter

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        # One Redis round trip for the page instead of one per row.
        self._statuses, self._remaining = sale_statuses(list(changelist.result_list))
        self._links = self._allowed_links(request)
        return changelist

    def view_on_site(self, obj):
        return reverse("activity-page", args=[obj.pk])

    # --- the list's columns ---------------------------------------------------------

    @admin.display(description="product", ordering="product__name")
    def product_and_merchant(self, obj):
        # The merchant under the product: the list fits 1280 px beside the navigation and the filters.
        owner = f"by {obj.owner.get_username()}" if obj.owner else "no merchant"
        return format_html("{}<br><small>{}</small>", obj.product, owner)

    @admin.display(description="merchant", ordering="owner__username")
    def merchant(self, obj):
        owner = obj.owner if obj is not None else None
        return owner.get_username() if owner else "–"

    @admin.display(description="price", ordering="seckill_price")
    def price(self, obj):
        return f"¥{obj.seckill_price}"

    @admin.display(description="when", ordering="start_at")
    def when(self, obj):
        start, end = timezone.localtime(obj.start_at), timezone.localtime(obj.end_at)
        until = f"{end:%H:%M}" if end.date() == start.date() else f"{end:%b %d %H:%M}"
        return format_html('<span class="sale-when">{}<br>– {}</span>', f"{start:%b %d %H:%M}", until)

    @admin.display(description="status")
    def status_badge(self, obj):
        status = getattr(self, "_statuses", {}).get(obj.pk) or sale_status(activity=obj, remaining=None)
        return format_html(
            '<span class="sale-badge sale-{}" title="{}">{}</span>',
            status.replace(" ", "-"),
            SaleStatus.HELP[status],
            status,
        )

    @admin.display(description="left")
    def stock_left(self, obj):
        value = getattr(self, "_remaining", {}).get(obj.pk)
        return f"{'–' if value is None else value} / {obj.total_stock}"

    @admin.display(description="orders", ordering="paid_count")
    def orders_summary(self, obj):
        return format_html('<span class="sale-orders">{} paid<br>{} pending</span>', obj.paid_count, obj.pending_count)

    @admin.display(description="see")
    def links(self, obj):
        allowed = getattr(self, "_links", {})
        shown = [(reverse("admin:seckill_activity_live", args=[obj.pk]), "live view")]
        if allowed.get("orders"):
            shown.append((orders_url(obj.pk), "orders"))
        if allowed.get("report"):
            shown.append((reverse("admin:orders_reconciliationreport_activity", args=[obj.pk]), "report"))
        shown.append((self.view_on_site(obj), "on site"))
        # One per line: the list fits 1280 px beside the navigation and the filters.
        return format_html('<span class="sale-links">{}</span>', format_html_join("", '<a href="{}">{}</a>', shown))

    # --- deleting -------------------------------------------------------------------------

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        # The stock row, its ledger and the stock checks go with their sale: nobody deletes those alone.
        perms_needed -= {str(m._meta.verbose_name) for m in (SeckillStock, StockMovement, ReconciliationReport)}
        refusals = [f"{a}: {why}" for a in objs if (why := _delete_refusal(a))]
        # A refusal counts as protected: the page explains it and a POST deletes nothing.
        return deleted, counts, perms_needed, refusals or protected

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "owner":
            # Staff accounts (the merchants among them), by name; a superuser's choice only.
            kwargs["queryset"] = get_user_model().objects.filter(is_staff=True).order_by("username")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        label, help_text = FORM_WORDS.get(db_field.name, (None, None))
        if field is not None:
            field.label = label or field.label
            field.help_text = help_text or field.help_text
            if db_field.name in ROOM_FIELDS:
                field.required = False  # a form posted without them (an older page) keeps the defaults
        return field

    # --- saving ---------------------------------------------------------------------------

    def save_model(self, request, obj, form, change):
        if not change and not request.user.is_superuser:
            obj.owner = request.user  # a merchant's new sale is theirs, whatever was posted
        try:
            activity_save(activity=obj)
            if change and "owner" in form.changed_data:  # a superuser's form only: read-only otherwise
                activity_owner_set(activity_id=obj.pk, owner=obj.owner)
        except InsufficientStock as exc:
            messages.error(request, f"Stock not changed: {exc}.")
        except ActivityChangeRefused as exc:  # the form refused it already, unless it changed meanwhile
            messages.error(request, f"Not saved: {exc}.")

    def get_readonly_fields(self, request, obj=None):
        fields = [*super().get_readonly_fields(request, obj), "room_figures_shown"]
        if not request.user.is_superuser:
            # Only a superuser hands a sale to another merchant; the others see the name.
            fields += ["owner", "merchant"]
        if obj is not None:
            locked = activity_locked_fields(activity=stored_activity(obj))
            fields += [*locked, *(LOCKED_SHOWN[name] for name in locked if name in LOCKED_SHOWN)]
        return fields

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        # The owner as a name, not a link to an account page only superusers may open.
        swap = {} if request.user.is_superuser else {"owner": "merchant"}
        if obj is not None:
            # A locked field shows the model's label and help; these show merchants' words.
            locked = activity_locked_fields(activity=stored_activity(obj))
            swap |= {name: shown for name, shown in LOCKED_SHOWN.items() if name in locked}
        return [
            (title, {**opts, "fields": [swap.get(f, f) if isinstance(f, str) else f for f in opts["fields"]]})
            for title, opts in fieldsets
        ]

    @admin.display(description="Room figures")
    def room_figures_shown(self, obj):
        """The room's figures (waiting, let in, bought, no-shows, closed at) and its seed."""
        if obj is None or obj.pk is None or obj.admission_mode != Activity.AdmissionMode.ROOM:
            return "–"
        try:
            figures = room_figures(obj)
        except redis.RedisError:
            return "unknown: the stock counter is out of reach"
        rows = [
            ("state", figures.get("state", "unknown")),
            ("waiting", figures.get("waiting", "–")),
            ("let in", figures.get("admitted", "–")),
            ("let in, not done", figures.get("admitted_active", "–")),
            ("tickets used", figures.get("tickets_used", "–")),
            ("bought (orders)", figures.get("bought", "–")),
            ("no-shows", figures.get("noshows", "–")),
            ("measured rate (per s)", figures.get("measured_rate") or "–"),
            ("closed at", figures.get("closed_at") or "–"),
            ("seed commitment", figures.get("commitment") or "–"),
            ("seed", figures.get("seed") or "published after the start"),
        ]
        return format_html(
            '<table class="room-figures">{}</table>',
            format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
        )

    @admin.display(description="Sale price")
    def locked_sale_price(self, obj):
        return f"¥{obj.seckill_price}"

    @admin.display(description="Safety stock (kept out of the sale)")
    def locked_safety_stock(self, obj):
        return obj.safety_stock

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is None:
            return form
        stored = stored_activity(obj)
        # The locked fields are read-only, so the form ignores them; a page opened before
        # the lock still posts them, and that change is refused aloud, not dropped silently.
        locked = {
            name: self.formfield_for_dbfield(cast(Field, Activity._meta.get_field(name)), request)
            for name in activity_locked_fields(activity=stored)
        }
        return type(form.__name__, (LockedFieldsForm, form), {"locked_fields": locked, "stored": stored})


def _delete_refusal(activity: Activity) -> str | None:
    """Why a sale cannot be deleted (None: it can)."""
    if activity.orders.exists():
        return "it has orders (shoppers bought from it); it stays for the records"
    if activity.phase == Activity.Phase.LIVE:
        return 'it is on sale now; end it first with "End now and clean up"'
    if activity.status == Activity.Status.WARMED:
        return 'its stock is loaded for the sale; end it first with "End now and clean up"'
    return None
