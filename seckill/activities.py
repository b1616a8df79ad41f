"""The sale's activities: create and edit them (an edit re-warms), schedule the start, make the
purchase token at the start, the flag page's answer, and the admin's blacklist and shopper-profile writes."""

import logging
import secrets
from datetime import datetime, timedelta
from decimal import Decimal

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inventory.models import Product, SeckillStock
from inventory.services import stock_create, stock_set_total
from orders.models import Order

from .lifecycle import WarmupError, _activity_relayout_logged, activity_start_schedule, activity_warmup
from .models import Activity
from .selectors import (
    ActivitySnapshot,
    activity_snapshot_forget,
    activity_snapshot_forget_local,
    blacklist_forget,
    shopper_facts_forget,
)

logger = logging.getLogger(__name__)


def activity_create(
    *,
    title: str,
    product: Product,
    seckill_price: Decimal,
    start_at: datetime,
    end_at: datetime,
    total_stock: int,
    per_user_limit: int = 1,
    shards: int = 1,
    safety_stock: int = 0,
    pay_timeout: int | None = None,
) -> Activity:
    """Create an activity together with its database stock row."""
    activity = Activity(
        title=title,
        product=product,
        seckill_price=seckill_price,
        start_at=start_at,
        end_at=end_at,
        total_stock=total_stock,
        per_user_limit=per_user_limit,
        shards=shards,
        safety_stock=safety_stock,
        pay_timeout=pay_timeout if pay_timeout is not None else settings.SECKILL_DEFAULT_PAY_TIMEOUT,
    )
    activity.full_clean()
    with transaction.atomic():
        activity.save()
        stock_create(activity_id=activity.pk, total=total_stock)
        activity_start_schedule(activity_id=activity.pk)
    activity_snapshot_forget(activity.pk)  # the id may be cached as absent
    return activity


_SYSTEM_FIELDS = frozenset({"id", "status", "purchase_token", "warmed_at", "created_at"})

# The shard count may change until this long before the start: the stock is laid out
# again in Redis after the save, and every web process must see the new count (its
# cached copy of the activity lives SECKILL_ACTIVITY_CACHE_TTL) before the first purchase.
SHARDS_CHANGE_LEAD = timedelta(seconds=60)


class ActivityChangeRefused(Exception):
    """An edit that would break the running sale; nothing was saved."""


def activity_shards_changeable(*, activity: Activity, now: datetime | None = None) -> bool:
    """Whether the stored activity's shard count may still change: its start is more than
    SHARDS_CHANGE_LEAD away and it has no order. Afterwards reservations may sit in the
    shards' logs, and moving live stock between keys could lose or double units."""
    now = now or timezone.now()
    return activity.start_at - SHARDS_CHANGE_LEAD > now and not Order.objects.filter(activity_id=activity.pk).exists()


def activity_save(*, activity: Activity) -> Activity:
    """Save an activity edited in admin and keep its stock row in step.

    The total may change only while nothing is sold (enforced by the stock service).
    A warmed activity whose total or safety stock changed is warmed again, so that
    Redis never sells what the database no longer has. The shard count may change only
    while ``activity_shards_changeable`` (and the new start is as far away); on a
    warmed activity the stock is then laid out again (``activity_stock_relayout``).
    Raises ActivityChangeRefused otherwise, before anything is written.
    """
    stored = Activity.objects.filter(pk=activity.pk).first()
    if stored is not None and stored.shards != activity.shards:
        now = timezone.now()
        if not (activity_shards_changeable(activity=stored, now=now) and activity.start_at - SHARDS_CHANGE_LEAD > now):
            raise ActivityChangeRefused(
                f"the shard count stays {stored.shards}: it can change only until "
                f"{int(SHARDS_CHANGE_LEAD.total_seconds())} seconds before the start, while no order exists"
            )
    with transaction.atomic():
        if activity._state.adding:
            activity.save()
        else:
            # The form's copy may be stale: never write back what the system owns.
            editable = [f.name for f in Activity._meta.concrete_fields if f.name not in _SYSTEM_FIELDS]
            activity.save(update_fields=editable)
            if activity.start_at > timezone.now():
                # The start moved into the future: a token handed out already must not open it early.
                Activity.objects.filter(pk=activity.pk).update(purchase_token=None)
        stock = SeckillStock.objects.filter(activity_id=activity.pk).first()
        if stock is None:
            stock_create(activity_id=activity.pk, total=activity.total_stock)
        elif stock.total != activity.total_stock:
            stock_set_total(activity_id=activity.pk, total=activity.total_stock)
        activity_start_schedule(activity_id=activity.pk)
    activity_snapshot_forget(activity.pk)
    if stored is not None and stored.status == Activity.Status.WARMED:
        # After the commit: the admin saves inside a transaction, and Redis waits for none.
        if stored.shards != activity.shards:
            old_shards = stored.shards
            transaction.on_commit(lambda: _activity_relayout_logged(activity_id=activity.pk, old_shards=old_shards))
        elif (stored.total_stock, stored.safety_stock) != (activity.total_stock, activity.safety_stock):
            transaction.on_commit(lambda: _activity_rewarm_logged(activity_id=activity.pk))
    return activity


def _activity_rewarm_logged(*, activity_id: int) -> None:
    try:
        activity_warmup(activity_id=activity_id, force=True)
    except (WarmupError, redis.RedisError) as exc:  # the autowarm task and the operator can retry
        logger.error("re-warm after an edit of activity %s failed: %s", activity_id, exc)


def activity_token_ensure(*, activity_id: int, now: datetime | None = None) -> str | None:
    """Create the purchase token once the activity has started; None before the start.

    A conditional UPDATE, so concurrent callers (the start task, beat, a web process
    noticing the start first) agree on one token. In the first second after the start
    every request whose cached activity has no token yet lands here: a caller that finds
    the token stored costs one SELECT, and only the one UPDATE that wrote it drops the
    cached copies (each drop makes every process read the activity again).
    """
    now = now or timezone.now()
    started = Activity.objects.filter(pk=activity_id, start_at__lte=now)
    stored = started.values_list("purchase_token", flat=True).first()
    if stored is not None:
        # Another caller created it: this process's copy is stale, the shared one is not.
        activity_snapshot_forget_local(activity_id)
        return stored
    token = secrets.token_urlsafe(24)
    if started.filter(purchase_token__isnull=True).update(purchase_token=token):
        activity_snapshot_forget(activity_id)
        return token
    # Not started, or another caller wrote the token between the two queries.
    return started.values_list("purchase_token", flat=True).first()


def activity_flag(*, activity: ActivitySnapshot, now: datetime) -> dict:
    """What the flag (JSON and flag.js) says: started?, ended?, and the token from the start."""
    phase = activity.phase_at(now)
    token = None
    if phase == Activity.Phase.LIVE:
        token = activity.purchase_token or activity_token_ensure(activity_id=activity.id, now=now)
    return {
        "started": phase != Activity.Phase.UPCOMING,
        "ended": phase == Activity.Phase.ENDED,
        "token": token,
        "server_time": now,
        "start_at": activity.start_at,
        "end_at": activity.end_at,
    }


# --- traffic gates: blacklist and shopper profiles (admin) ----------------------------
def blacklist_entry_save(*, entry) -> None:
    """Save a blacklist entry; web processes apply it within SECKILL_BLACKLIST_CACHE_TTL."""
    entry.full_clean()
    entry.save()
    blacklist_forget()


def blacklist_entries_delete(*, queryset) -> int:
    deleted, _ = queryset.delete()
    blacklist_forget()
    return deleted


def shopper_profile_save(*, profile) -> None:
    profile.save()
    shopper_facts_forget(profile.user_id)
