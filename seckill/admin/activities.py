from datetime import datetime, timedelta
from typing import cast

import redis
from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Field, Q
from django.http import HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from inventory.models import SeckillStock, StockMovement
from inventory.services import InsufficientStock
from orders.models import AnomalyOrder, Order, ReconciliationReport
from orders.selectors import activities_visible_to, sales_visible_filter, sees_every_sale
from seckill.admin.dashboard import SaleStatus, live_figures, sale_status, sale_statuses
from seckill.models import Activity, BlacklistEntry, ShopperProfile
from seckill.purchase.shoppers import blacklist_entries_delete, blacklist_entry_save, shopper_profile_save
from seckill.room.queue import room_pause
from seckill.room.status import room_figures
from seckill.sale.activities import (
    SHARDS_CHANGE_LEAD,
    ActivityChangeRefused,
    activity_duplicate,
    activity_edit_refusal,
    activity_locked_fields,
    activity_owner_set,
    activity_save,
)
from seckill.sale.lifecycle import WarmupError, activity_stop_selling, activity_warmup
from seckill.sale.pages import activity_page_publish


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


def _stored(obj: Activity) -> Activity:
    """The row as stored: a refused form has written its posted values into ``obj``."""
    return Activity.objects.filter(pk=obj.pk).first() or obj


class _LockedFieldsForm(forms.ModelForm):
    """Refuses, with the service's words, a posted change of a field that is locked."""

    locked_fields: dict[str, forms.Field] = {}
    stored: Activity

    def clean(self):
        cleaned = super().clean() or {}
        changed = [name for name, field in self.locked_fields.items() if self._posted_change(name, field)]
        changed += self.changed_data  # the editable ones (a shard change checks the new start)
        refusal = activity_edit_refusal(
            stored=self.stored,
            changed=changed,
            end_at=cleaned.get("end_at"),
            start_at=cleaned.get("start_at") or self.stored.start_at,
            now=timezone.now(),
        )
        if refusal:
            raise ValidationError(f"Not saved: {refusal}.")
        return cleaned

    def _posted_change(self, name: str, field: forms.Field) -> bool:
        posted = field.widget.value_from_datadict(self.data, self.files, self.add_prefix(name))
        if posted is None or (isinstance(posted, list) and not any(posted)):
            return False  # not posted: the page showed it read-only
        initial = getattr(self.stored, name)
        if hasattr(initial, "microsecond"):
            initial = initial.replace(microsecond=0)  # as the page showed it
        return field.has_changed(initial, posted)


# The admin wears the shop's name, as its pages do (templates/base.html).
admin.site.site_header = "Flash sale · shop admin"
admin.site.site_title = "Flash sale admin"
admin.site.index_title = "Run the shop"

# The sale form's words for merchants (the model's help speaks of settings names).
FORM_WORDS = {
    "seckill_price": ("Sale price", None),
    "safety_stock": (None, "Units kept out of the sale, for corrections after a fault."),
    "shards": ("Stock parts", None),
    "rate_per_user": (None, 'Purchases one shopper may try, e.g. "5/s"; "off": no limit; blank: the shop\'s default.'),
    "rate_per_ip": (None, 'Purchases one address may try, e.g. "50/s"; "off": no limit; blank: the shop\'s default.'),
    "admission_rate": (
        None,
        "Purchases per second let through to the stock, all shoppers together; 0: no cap; blank: the shop's default.",
    ),
    "min_member_level": (None, "Shoppers below this membership level may not buy; blank: no rule."),
    "min_account_age_days": (None, "Accounts younger than this may not buy; blank: no rule."),
}


# Locked fields shown read-only through these (the model's label and help are not for merchants).
LOCKED_SHOWN = {"seckill_price": "locked_sale_price", "safety_stock": "locked_safety_stock"}


class SaleStatusFilter(admin.SimpleListFilter):
    """The lifecycle in the status badge's words (sold out is a live sale with nothing left:
    the database alone cannot tell it, so it is listed under "live")."""

    title = "status"
    parameter_name = "sale"

    def lookups(self, request, model_admin):
        return [
            (SaleStatus.SCHEDULED, "scheduled"),
            (SaleStatus.WARMING, "warming"),
            (SaleStatus.LIVE, "live or sold out"),
            (SaleStatus.ENDED, "ended"),
        ]

    def queryset(self, request, queryset):
        now = timezone.now()
        upcoming = Q(start_at__gt=now) & ~Q(status=Activity.Status.ENDED)
        ended = Q(status=Activity.Status.ENDED) | Q(end_at__lte=now)
        match self.value():
            case SaleStatus.SCHEDULED:
                return queryset.filter(upcoming, status=Activity.Status.SCHEDULED)
            case SaleStatus.WARMING:
                return queryset.filter(upcoming, status=Activity.Status.WARMED)
            case SaleStatus.LIVE:
                return queryset.filter(start_at__lte=now).exclude(ended)
            case SaleStatus.ENDED:
                return queryset.filter(ended)
        return queryset


def duplicate_start(now: datetime) -> datetime:
    """A copy's start: the next whole hour at least an hour from now (the merchant edits it)."""
    later = now + timedelta(hours=1)
    return later.replace(minute=0, second=0, microsecond=0) + (
        timedelta(hours=1) if later.minute or later.second else timedelta(0)
    )


def _duplicate_title(title: str) -> str:
    suffix = " (copy)"
    return title if title.endswith(suffix) else (title[: 200 - len(suffix)] + suffix)


# The waiting room's settings (seckill.room): each has a default.
ROOM_FIELDS = frozenset({"admission_mode", "room_prequeue_minutes", "room_rate", "room_cap", "room_window_seconds"})


@admin.register(Activity)
class ActivityAdmin(admin.ModelAdmin):
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
                    "The start, the sale price and the stock fields are locked once the sale is warmed (its stock "
                    "loaded) or has started: shoppers reserve and pay under them. The end may then move later, "
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
                    "Shards split the stock into several parts so that a very large crowd is served in parallel "
                    "(1 suits almost every sale). They can change until "
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
            shown.append((_orders_url(obj.pk), "orders"))
        if allowed.get("report"):
            shown.append((reverse("admin:orders_reconciliationreport_activity", args=[obj.pk]), "report"))
        shown.append((self.view_on_site(obj), "on site"))
        # One per line: the list fits 1280 px beside the navigation and the filters.
        return format_html('<span class="sale-links">{}</span>', format_html_join("", '<a href="{}">{}</a>', shown))

    def _allowed_links(self, request) -> dict[str, bool]:
        """Which of the other pages this user may open: no link answers 403."""
        registry = self.admin_site._registry
        orders, reports = registry.get(Order), registry.get(ReconciliationReport)
        return {
            "orders": orders is not None and orders.has_view_permission(request),
            # The orders admin says who may read a sale's report (merchants too).
            "report": reports is not None
            and getattr(reports, "may_see_activity_report", reports.has_view_permission)(request),
        }

    # --- the live view, the change page's links, the copy --------------------------------

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:activity_id>/live/", view(self.live_view), name="seckill_activity_live"),
            path("<int:activity_id>/live.json", view(self.live_json), name="seckill_activity_live_json"),
            path("<int:activity_id>/duplicate/", view(self.duplicate_view), name="seckill_activity_duplicate"),
            *super().get_urls(),
        ]

    def _viewable(self, request, activity_id: int) -> Activity:
        """The sale, if this user may see it; another merchant's answers as a missing one (404)."""
        activity = get_object_or_404(activities_visible_to(user=request.user).select_related("product"), pk=activity_id)
        if not self.has_view_permission(request, activity):
            raise PermissionDenied
        return activity

    def live_view(self, request, activity_id: int):
        activity = self._viewable(request, activity_id)
        allowed = self._allowed_links(request)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Live: {activity}",
            "activity": activity,
            "figures": live_figures(activity=activity),
            "json_url": reverse("admin:seckill_activity_live_json", args=[activity.pk]),
            "orders_url": _orders_url(activity.pk) if allowed["orders"] else None,
            "report_url": reverse("admin:orders_reconciliationreport_activity", args=[activity.pk])
            if allowed["report"]
            else None,
            "anomalies_url": _anomalies_url(activity.pk) if self._may_view(request, AnomalyOrder) else None,
            "opts": self.model._meta,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/seckill/activity/live.html", context)

    def live_json(self, request, activity_id: int):
        activity = self._viewable(request, activity_id)
        return JsonResponse(live_figures(activity=activity))  # admin_view: never cached

    def _may_view(self, request, model) -> bool:
        model_admin = self.admin_site._registry.get(model)
        return model_admin is not None and model_admin.has_view_permission(request)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = dict(extra_context or {})
        visible = activities_visible_to(user=request.user)
        activity = visible.filter(pk=object_id).first() if str(object_id).isdigit() else None
        if activity is not None:
            allowed = self._allowed_links(request)
            extra["sale_links"] = [
                (reverse("admin:seckill_activity_live", args=[activity.pk]), "Live view"),
                *([(_orders_url(activity.pk), "Orders")] if allowed["orders"] else []),
                *(
                    [(reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]), "Report")]
                    if allowed["report"]
                    else []
                ),
            ]
            extra["can_duplicate"] = self.has_add_permission(request)
            extra["duplicate_url"] = reverse("admin:seckill_activity_duplicate", args=[activity.pk])
        return super().change_view(request, object_id, form_url, extra)

    def duplicate_view(self, request, activity_id: int):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        activity = self._viewable(request, activity_id)
        if not self.has_add_permission(request):
            raise PermissionDenied
        copy = self._duplicate(request, activity)
        return HttpResponseRedirect(reverse("admin:seckill_activity_change", args=[copy.pk]))

    def _duplicate(self, request, activity: Activity) -> Activity:
        start = duplicate_start(timezone.now())
        copy = activity_duplicate(activity=activity, start_at=start, title=_duplicate_title(activity.title))
        self.message_user(
            request,
            f'"{copy}" is a new scheduled sale starting {timezone.localtime(start):%b %d %H:%M}: '
            "check its start and stock, then save.",
            messages.SUCCESS,
        )
        return copy

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
            locked = activity_locked_fields(activity=_stored(obj))
            fields += [*locked, *(LOCKED_SHOWN[name] for name in locked if name in LOCKED_SHOWN)]
        return fields

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        # The owner as a name, not a link to an account page only superusers may open.
        swap = {} if request.user.is_superuser else {"owner": "merchant"}
        if obj is not None:
            # A locked field shows the model's label and help; these show merchants' words.
            locked = activity_locked_fields(activity=_stored(obj))
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
        stored = _stored(obj)
        # The locked fields are read-only, so the form ignores them; a page opened before
        # the lock still posts them, and that change is refused aloud, not dropped silently.
        locked = {
            name: self.formfield_for_dbfield(cast(Field, Activity._meta.get_field(name)), request)
            for name in activity_locked_fields(activity=stored)
        }
        return type(form.__name__, (_LockedFieldsForm, form), {"locked_fields": locked, "stored": stored})

    # --- actions (each offered only to who may run it: ``permissions``) -------------------

    def _run(self, request, queryset, action, verb):
        for activity in queryset:
            try:
                said = action(activity)
            except (WarmupError, redis.RedisError) as exc:
                self.message_user(request, f"{activity}: {verb} failed: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{activity}: {said}", messages.SUCCESS)

    @admin.action(description="Load the stock now (warm up)", permissions=["change"])
    def warm_up(self, request, queryset):
        self._run(request, queryset, lambda a: _loaded_words(activity_warmup(activity_id=a.pk)), "loading the stock")

    @admin.action(description="Reload the stock from the orders (force re-warm)", permissions=["change"])
    def force_rewarm(self, request, queryset):
        self._run(
            request,
            queryset,
            lambda a: _loaded_words(activity_warmup(activity_id=a.pk, force=True)),
            "reloading the stock",
        )

    @admin.action(description="End now and clean up", permissions=["change"])
    def end_and_clean_up(self, request, queryset):
        from seckill.tasks import activity_close_task

        now = timezone.now()
        started = []
        for activity in queryset:
            if activity.start_at > now:
                # Ending it now would end it before its start: the database refuses that.
                self.message_user(
                    request,
                    f"{activity}: not ended, it has not started (move its dates, or delete it while no order exists).",
                    messages.WARNING,
                )
                continue
            activity_stop_selling(activity_id=activity.pk)
            started.append(activity)
        # Closing waits one activity-cache lifetime so that no web process still sells.
        self._run(
            request,
            started,
            lambda a: (
                activity_close_task.apply_async(args=[a.pk], countdown=3)
                and "ended; the last orders are written and the stock settled in a few seconds"
            ),
            "ending",
        )

    @admin.action(description="Publish the sale page (files for the CDN)", permissions=["change"])
    def publish(self, request, queryset):
        for activity in queryset:
            paths = activity_page_publish(activity_id=activity.pk)
            self.message_user(request, f"{activity}: page published ({len(paths)} files).", messages.SUCCESS)

    @admin.action(description="Pause the waiting room", permissions=["change"])
    def pause_room(self, request, queryset):
        self._room_pause(request, queryset, paused=True)

    @admin.action(description="Resume the waiting room", permissions=["change"])
    def resume_room(self, request, queryset):
        self._room_pause(request, queryset, paused=False)

    def _room_pause(self, request, queryset, *, paused: bool) -> None:
        def pause(activity: Activity) -> str:
            room_pause(activity.pk, paused=paused)
            return "waiting room paused" if paused else "waiting room resumed"

        for activity in queryset:
            if activity.admission_mode != Activity.AdmissionMode.ROOM:
                self.message_user(request, f"{activity}: has no waiting room.", messages.WARNING)
                continue
            self._run(request, [activity], pause, "pausing" if paused else "resuming")

    @admin.action(description="Duplicate as a new scheduled sale", permissions=["add"])
    def duplicate(self, request, queryset):
        for activity in queryset:
            self._duplicate(request, activity)


def _delete_refusal(activity: Activity) -> str | None:
    """Why a sale cannot be deleted (None: it can)."""
    if activity.orders.exists():
        return "it has orders (shoppers bought from it); it stays for the records"
    if activity.phase == Activity.Phase.LIVE:
        return 'it is on sale now; end it first with "End now and clean up"'
    if activity.status == Activity.Status.WARMED:
        return 'its stock is loaded for the sale; end it first with "End now and clean up"'
    return None


def _loaded_words(result) -> str:
    return (
        f"stock loaded: {result.remaining} units on sale, {result.unordered_units} reserved and not yet ordered "
        f"(the database has {result.db_available} of {result.db_total} available)."
    )


def _orders_url(activity_id: int) -> str:
    return f"{reverse('admin:orders_order_changelist')}?activity__id__exact={activity_id}"


def _anomalies_url(activity_id: int) -> str:
    return f"{reverse('admin:orders_anomalyorder_changelist')}?activity__id__exact={activity_id}&status__exact=open"


@admin.register(BlacklistEntry)
class BlacklistEntryAdmin(admin.ModelAdmin):
    list_display = ["kind", "value", "reason", "expires_at", "created_at"]
    list_filter = ["kind"]
    search_fields = ["value", "reason"]

    def save_model(self, request, obj, form, change):
        blacklist_entry_save(entry=obj)

    def delete_model(self, request, obj):
        blacklist_entries_delete(queryset=BlacklistEntry.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        blacklist_entries_delete(queryset=queryset)


@admin.register(ShopperProfile)
class ShopperProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "member_level", "updated_at"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]

    def save_model(self, request, obj, form, change):
        shopper_profile_save(profile=obj)
