from typing import cast

import redis
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Field, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from inventory.models import SeckillStock
from inventory.services import InsufficientStock
from orders.models import Order

from .activities import (
    SHARDS_CHANGE_LEAD,
    ActivityChangeRefused,
    activity_edit_refusal,
    activity_locked_fields,
    activity_save,
    blacklist_entries_delete,
    blacklist_entry_save,
    shopper_profile_save,
)
from .lifecycle import WarmupError, activity_stop_selling, activity_warmup
from .models import Activity, BlacklistEntry, ShopperProfile
from .pages import activity_page_publish
from .selectors import redis_remaining_many


class SeckillStockInline(admin.StackedInline):
    model = SeckillStock
    can_delete = False
    verbose_name_plural = "database stock and its two shares"
    # A tuple: both attributes take it (a list is typed for one only).
    readonly_fields = ("total", "available", "redis_share", "reserve", "version", "updated_at")
    fields = readonly_fields
    extra = 0

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="Redis's share left (available − reserve)")
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


@admin.register(Activity)
class ActivityAdmin(admin.ModelAdmin):
    list_display = [
        "title",
        "product",
        "seckill_price",
        "start_at",
        "end_at",
        "phase_display",
        "status",
        "total_stock",
        "redis_remaining",
        "pending_orders",
        "paid_orders",
        "report_link",
    ]
    list_filter = ["status", "start_at", "end_at"]
    search_fields = ["title", "product__name"]
    date_hierarchy = "start_at"
    list_select_related = ["product"]
    autocomplete_fields = ["product"]
    # A tuple: also the "State" fieldset's fields (a list is typed for one only).
    readonly_fields = ("status", "warmed_at", "created_at", "updated_at")
    inlines = [SeckillStockInline]
    actions = ["warm_up", "force_rewarm", "end_and_clean_up", "publish"]
    fieldsets = [
        (
            None,
            {
                "fields": ["title", "product", "seckill_price", "start_at", "end_at"],
                "description": (
                    "The start, the seckill price and the stock fields are locked once the sale is warmed or has "
                    "started: reservations are made and charged under them. The end may then move later, "
                    'never into the past (use "End now and clean up").'
                ),
            },
        ),
        (
            "Stock",
            {
                "fields": ["total_stock", "safety_stock", "db_reserve", "shards", "per_user_limit"],
                "description": (
                    "Two owners, never the same unit: Redis sells the total less the safety stock and the "
                    "database reserve; the database reserve is sold only while Redis is away. "
                    "Shards split the stock over several Redis keys (for a Redis Cluster; 1 is the fast default). "
                    f"They can change until {int(SHARDS_CHANGE_LEAD.total_seconds())} seconds before the start, "
                    "while no order exists and the sale is not warmed; the warm-up lays the stock out over them."
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
                "description": "Blank rates use the SECKILL_* defaults of the settings; see docs/GATES.md.",
            },
        ),
        ("State", {"fields": readonly_fields}),
    ]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                pending_count=Count("orders", filter=Q(orders__status=Order.Status.PENDING)),
                paid_count=Count("orders", filter=Q(orders__status=Order.Status.PAID)),
            )
        )

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        # One MGET for the page instead of one GET per row.
        try:
            self._remaining = redis_remaining_many([a.pk for a in changelist.result_list])
        except redis.RedisError:
            self._remaining = {}
        return changelist

    @admin.display(description="phase")
    def phase_display(self, obj):
        return obj.phase

    @admin.display(description="Redis remaining")
    def redis_remaining(self, obj):
        value = getattr(self, "_remaining", {}).get(obj.pk)
        return "–" if value is None else value

    @admin.display(description="pending", ordering="pending_count")
    def pending_orders(self, obj):
        return obj.pending_count

    @admin.display(description="paid", ordering="paid_count")
    def paid_orders(self, obj):
        return obj.paid_count

    @admin.display(description="report")
    def report_link(self, obj):
        url = reverse("admin:orders_reconciliationreport_activity", args=[obj.pk])
        return format_html('<a href="{}">report</a>', url)

    def save_model(self, request, obj, form, change):
        try:
            activity_save(activity=obj)
        except InsufficientStock as exc:
            messages.error(request, f"Stock not changed: {exc}.")
        except ActivityChangeRefused as exc:  # the form refused it already, unless it changed meanwhile
            messages.error(request, f"Not saved: {exc}.")

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            fields += activity_locked_fields(activity=_stored(obj))
        return fields

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

    def _run(self, request, queryset, action, verb):
        for activity in queryset:
            try:
                result = action(activity)
            except (WarmupError, redis.RedisError) as exc:
                self.message_user(request, f"{activity}: {verb} failed: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{activity}: {verb} done: {result}", messages.SUCCESS)

    @admin.action(description="Warm up (load stock into Redis)", permissions=["change"])
    def warm_up(self, request, queryset):
        self._run(request, queryset, lambda a: activity_warmup(activity_id=a.pk).as_dict(), "warm-up")

    @admin.action(description="Force re-warm (derive stock from the database and the log)", permissions=["change"])
    def force_rewarm(self, request, queryset):
        self._run(request, queryset, lambda a: activity_warmup(activity_id=a.pk, force=True).as_dict(), "re-warm")

    @admin.action(description="End now and clean up", permissions=["change"])
    def end_and_clean_up(self, request, queryset):
        from .tasks import activity_close_task

        for activity in queryset:
            activity_stop_selling(activity_id=activity.pk)
        # Closing waits one activity-cache lifetime so that no web process still sells.
        self._run(
            request,
            queryset,
            lambda a: activity_close_task.apply_async(args=[a.pk], countdown=3) and "closing in a few seconds",
            "end",
        )

    @admin.action(description="Publish the activity page (static files for a CDN origin)", permissions=["change"])
    def publish(self, request, queryset):
        for activity in queryset:
            paths = activity_page_publish(activity_id=activity.pk)
            self.message_user(request, f"{activity}: published {', '.join(map(str, paths))}", messages.SUCCESS)


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
