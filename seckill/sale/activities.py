"""The sale's activities: create and edit them (locked once warmed or started), schedule the start, make the
purchase token at the start, the flag page's answer, and the admin's blacklist and shopper-profile writes."""

import secrets
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from inventory.models import Product, SeckillStock
from inventory.services import stock_create, stock_set_total
from orders.models import Order
from seckill.models import Activity, default_db_reserve
from seckill.sale.lifecycle import _activity_relayout_logged, activity_start_schedule
from seckill.sale.snapshot import ActivitySnapshot, activity_snapshot_forget, activity_snapshot_forget_local


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
    db_reserve: int | None = None,
    pay_timeout: int | None = None,
    owner: User | None = None,
) -> Activity:
    """Create an activity together with its database stock row. ``db_reserve`` None: the
    default share of the total (SECKILL_DB_RESERVE_PERCENT), within what the safety
    stock leaves. ``owner``: the merchant who runs it (None: only staff who see every
    sale see it)."""
    activity = Activity(
        title=title,
        owner=owner,
        product=product,
        seckill_price=seckill_price,
        start_at=start_at,
        end_at=end_at,
        total_stock=total_stock,
        per_user_limit=per_user_limit,
        shards=shards,
        safety_stock=safety_stock,
        db_reserve=db_reserve,
        pay_timeout=pay_timeout if pay_timeout is not None else settings.SECKILL_DEFAULT_PAY_TIMEOUT,
    )
    _db_reserve_default(activity)
    activity.full_clean()
    with transaction.atomic():
        activity.save()
        stock_create(activity_id=activity.pk, total=total_stock, reserve=activity.reserve_units)
        activity_start_schedule(activity_id=activity.pk)
    activity_snapshot_forget(activity.pk)  # the id may be cached as absent
    return activity


def _db_reserve_default(activity: Activity) -> None:
    """A blank reserve becomes the default share, so a saved activity always says how
    many units its database path may sell."""
    if activity.db_reserve is None and activity.total_stock is not None:
        held_back = max(0, activity.total_stock - (activity.safety_stock or 0))
        activity.db_reserve = min(default_db_reserve(activity.total_stock), held_back)


_SYSTEM_FIELDS = frozenset({"id", "status", "purchase_token", "warmed_at", "created_at", "room_seed"})
# Set when the sale is made; changed only by ``activity_owner_set`` (a superuser's choice),
# so an edit from a page opened before the change never hands the sale back.
_NOT_WRITTEN_BY_EDITS = _SYSTEM_FIELDS | {"owner"}

# The shard count may change until this long before the start: every web process must see
# the new count (its cached copy of the activity lives SECKILL_ACTIVITY_CACHE_TTL) before
# the first purchase.
SHARDS_CHANGE_LEAD = timedelta(seconds=60)

# What a reservation was made under: once the sale is warmed or has started, Redis holds
# stock laid out from these and shoppers hold reservations charged at this price.
LIVE_LOCKED_FIELDS = (
    "start_at",
    "seckill_price",
    "total_stock",
    "shards",
    "per_user_limit",
    "safety_stock",
    "db_reserve",
)
LIVE_LOCK_REASON = "cannot change once the stock is loaded or the sale has started"
# Units may be sold (database path) or ordered: the stock figures stay.
_STOCK_FIELDS = ("total_stock", "safety_stock", "db_reserve", "shards", "per_user_limit")


class ActivityChangeRefused(Exception):
    """An edit that would break the running sale; nothing was saved."""


def activity_is_live_locked(*, activity: Activity, now: datetime | None = None) -> bool:
    """Warmed, started or ended: Redis may hold its stock and shoppers their reservations."""
    now = now or timezone.now()
    return activity.status != Activity.Status.SCHEDULED or activity.start_at <= now


def activity_locked_fields(*, activity: Activity, now: datetime | None = None) -> dict[str, str]:
    """The fields of the stored activity that may no longer change, each with why: the one
    rule behind the admin's read-only fields and ``activity_save``'s refusals."""
    now = now or timezone.now()
    if activity.pk is None:
        return {}
    if activity_is_live_locked(activity=activity, now=now):
        return dict.fromkeys(LIVE_LOCKED_FIELDS, LIVE_LOCK_REASON)
    if Order.objects.filter(activity_id=activity.pk).exists():
        return dict.fromkeys(_STOCK_FIELDS, "cannot change once an order exists")
    if not activity_shards_changeable(activity=activity, now=now):
        return {
            "shards": (
                f"stays {activity.shards}: it can change only until "
                f"{int(SHARDS_CHANGE_LEAD.total_seconds())} seconds before the start, while no order exists"
            )
        }
    return {}


def activity_edit_refusal(
    *, stored: Activity, changed: list[str], end_at: datetime | None, start_at: datetime, now: datetime
) -> str | None:
    """Why an edit of ``stored`` is refused (None: it may be saved). ``changed``: the fields
    the edit changes; ``end_at`` and ``start_at``: their edited values."""
    locked = activity_locked_fields(activity=stored, now=now)
    reasons: dict[str, list[str]] = {}
    for name in changed:
        if name in locked:
            label = getattr(Activity._meta.get_field(name), "verbose_name", name)
            reasons.setdefault(locked[name], []).append(str(label))
    refusals = [f"{', '.join(labels)} {reason}" for reason, labels in reasons.items()]
    if "shards" in changed and "shards" not in locked and start_at - SHARDS_CHANGE_LEAD <= now:
        refusals.append(
            f"stock counters stays {stored.shards}: it can change only until "
            f"{int(SHARDS_CHANGE_LEAD.total_seconds())} seconds before the start"
        )
    # Earlier than stored (to the second: the form has no microseconds) and past.
    moved_earlier = end_at is not None and end_at < stored.end_at.replace(microsecond=0)
    if moved_earlier and end_at is not None and end_at <= now and activity_is_live_locked(activity=stored, now=now):
        refusals.append('The end cannot move into the past (it may move later; "End now and clean up" ends the sale)')
    return "; ".join(refusals) or None


def activity_shards_changeable(*, activity: Activity, now: datetime | None = None) -> bool:
    """Whether the stored activity's shard count may still change: its start is more than
    SHARDS_CHANGE_LEAD away and it has no order. Afterwards reservations may sit in the
    shards' logs, and moving live stock between keys could lose or double units."""
    now = now or timezone.now()
    return activity.start_at - SHARDS_CHANGE_LEAD > now and not Order.objects.filter(activity_id=activity.pk).exists()


def activity_save(*, activity: Activity) -> Activity:
    """Save an activity edited in admin and keep its stock row in step.

    Refused (ActivityChangeRefused, nothing written) when the edit changes a field
    ``activity_locked_fields`` locks, or moves a live sale's end into the past. So the
    stock, the layout and the price change only before the warm-up and the start, while
    no shopper can have reserved: every check of a shard change is a database fact read
    here, before anything is written. After the commit the old layout's keys that a
    failed warm-up may have left are removed (``activity_stock_relayout``).
    """
    _db_reserve_default(activity)
    stored = Activity.objects.filter(pk=activity.pk).first()
    with transaction.atomic():
        if stored is not None:
            # Row-locked: a warm-up's status update waits for this edit, or this edit sees it.
            stored = Activity.objects.select_for_update().get(pk=activity.pk)
            _refuse_locked_edit(stored=stored, activity=activity)
        relayout = stored is not None and stored.shards != activity.shards
        if activity._state.adding:
            activity.save()
        else:
            # The form's copy may be stale: never write back what the system owns.
            editable = [f.name for f in Activity._meta.concrete_fields if f.name not in _NOT_WRITTEN_BY_EDITS]
            activity.save(update_fields=editable)
            if activity.start_at > timezone.now():
                # The start moved into the future: a token handed out already must not open it early.
                Activity.objects.filter(pk=activity.pk).update(purchase_token=None)
        stock = SeckillStock.objects.filter(activity_id=activity.pk).first()
        if stock is None:
            stock_create(activity_id=activity.pk, total=activity.total_stock, reserve=activity.reserve_units)
        elif stored is not None and (stored.total_stock, stored.reserve_units) != (
            activity.total_stock,
            activity.reserve_units,
        ):
            # Only before any sale (the fields lock once an order exists): ``reserve`` is a live counter.
            stock_set_total(activity_id=activity.pk, total=activity.total_stock, reserve=activity.reserve_units)
        activity_start_schedule(activity_id=activity.pk)
        if relayout and stored is not None:
            old_shards = stored.shards
            # After the commit: Redis waits for no transaction.
            transaction.on_commit(lambda: _activity_relayout_logged(activity_id=activity.pk, old_shards=old_shards))
    activity_snapshot_forget(activity.pk)
    return activity


def activity_owner_set(*, activity_id: int, owner: User | None) -> None:
    """Hand the sale to another merchant (None: to nobody; only staff who see every sale
    see it then). Its orders go with it: they are seen through their sale."""
    Activity.objects.filter(pk=activity_id).update(owner=owner, updated_at=timezone.now())


def _refuse_locked_edit(*, stored: Activity, activity: Activity) -> None:
    changed = [name for name in LIVE_LOCKED_FIELDS if getattr(stored, name) != getattr(activity, name)]
    refusal = activity_edit_refusal(
        stored=stored, changed=changed, end_at=activity.end_at, start_at=activity.start_at, now=timezone.now()
    )
    if refusal:
        raise ActivityChangeRefused(refusal)


def activity_token_ensure(*, activity_id: int, now: datetime | None = None) -> str | None:
    """Create the purchase token once the activity has started; None before the start.

    A conditional UPDATE, so concurrent callers (the start task, beat, a web process
    noticing the start first) agree on one token. In the first second after the start
    every request whose cached activity has no token yet lands here: a caller that finds
    the token stored costs one SELECT, and only the one UPDATE that wrote it drops the
    cached copies (each drop makes every process read the activity again).

    Started means started by the database's clock (``Now()`` in the queries), not by the
    caller's ``now``: web processes whose clocks drift cannot open the sale early, and all
    callers agree on the moment.
    """
    started = Activity.objects.filter(pk=activity_id, start_at__lte=Now())
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


# Copied with the sale: what it sells and how (not its state, its token or its start).
_DUPLICATED_FIELDS = (
    "rate_per_user",
    "rate_per_ip",
    "admission_rate",
    "admission_burst",
    "min_member_level",
    "min_account_age_days",
    "captcha_required",
)


def activity_duplicate(*, activity: Activity, start_at: datetime, title: str) -> Activity:
    """A copy of ``activity`` as a new scheduled sale from ``start_at``, as long as the
    original, with its own stock row (the original's orders and Redis state stay its own)."""
    copy = activity_create(
        title=title,
        product=activity.product,
        seckill_price=activity.seckill_price,
        start_at=start_at,
        end_at=start_at + (activity.end_at - activity.start_at),
        total_stock=activity.total_stock,
        per_user_limit=activity.per_user_limit,
        shards=activity.shards,
        safety_stock=activity.safety_stock,
        db_reserve=activity.db_reserve,
        pay_timeout=activity.pay_timeout,
        owner=activity.owner,
    )
    for name in _DUPLICATED_FIELDS:
        setattr(copy, name, getattr(activity, name))
    return activity_save(activity=copy)
