"""The sale list's actions (each offered only to who may run it: ``permissions``), and the
copy of a sale that the action and the change page's button both make."""

from datetime import datetime, timedelta

import redis
from django.contrib import admin, messages
from django.utils import timezone

from seckill.models import Activity
from seckill.room.queue import room_pause
from seckill.sale.activities import activity_duplicate
from seckill.sale.lifecycle import WarmupError, activity_stop_selling, activity_warmup
from seckill.sale.pages import activity_page_publish


def duplicate_start(now: datetime) -> datetime:
    """A copy's start: the next whole hour at least an hour from now (the merchant edits it)."""
    later = now + timedelta(hours=1)
    return later.replace(minute=0, second=0, microsecond=0) + (
        timedelta(hours=1) if later.minute or later.second else timedelta(0)
    )


def _duplicate_title(title: str) -> str:
    suffix = " (copy)"
    return title if title.endswith(suffix) else (title[: 200 - len(suffix)] + suffix)


def duplicate_and_tell(model_admin: admin.ModelAdmin, request, activity: Activity) -> Activity:
    """A scheduled copy of ``activity``, and a message telling the merchant what to check."""
    start = duplicate_start(timezone.now())
    copy = activity_duplicate(activity=activity, start_at=start, title=_duplicate_title(activity.title))
    model_admin.message_user(
        request,
        f'"{copy}" is a new scheduled sale starting {timezone.localtime(start):%b %d %H:%M}: '
        "check its start and stock, then save.",
        messages.SUCCESS,
    )
    return copy


class ActivityActionsMixin(admin.ModelAdmin):
    """Warm up, force re-warm, end and clean up, publish, pause and resume the room, duplicate."""

    def _run(self, request, queryset, action, verb):
        for activity in queryset:
            try:
                said = action(activity)
            except (WarmupError, redis.RedisError) as exc:
                self.message_user(request, f"{activity}: {verb} failed: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{activity}: {said}", messages.SUCCESS)

    @admin.action(description="Get the stock ready now", permissions=["change"])
    def warm_up(self, request, queryset):
        self._run(request, queryset, lambda a: _loaded_words(activity_warmup(activity_id=a.pk)), "loading the stock")

    @admin.action(description="Recount the stock from the orders", permissions=["change"])
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

    @admin.action(description="Publish the sale page (for fast loading)", permissions=["change"])
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
    @admin.action(description="Duplicate as a new scheduled sale", permissions=["add"])
    def duplicate(self, request, queryset):
        for activity in queryset:
            duplicate_and_tell(self, request, activity)


def _loaded_words(result) -> str:
    return (
        f"stock loaded: {result.remaining} units on sale, {result.unordered_units} reserved and not yet ordered "
        f"(the database has {result.db_available} of {result.db_total} available)."
    )
