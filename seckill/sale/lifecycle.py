"""An activity's stock in Redis over its life: warm-up (and forced re-warm), a change of layout
(shard count), and the close that stops selling, reconciles and removes the keys."""

import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from orders.models import Order
from orders.services.lifecycle import orders_units_return
from seckill.models import Activity
from seckill.sale.reconciliation import Measurement, reconcile, reconciliation_measure
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot_fill, activity_snapshot_forget
from stock.identity import identity_differences, new_epoch, stock_identity, volatile_reasons
from stock.keys import ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import StockRedis, stock_redis

logger = logging.getLogger(__name__)


def activity_start_schedule(*, activity_id: int) -> None:
    """After the commit, schedule the start task for the activity's start time (eta).

    At the start it creates the purchase token, which exists nowhere before. Saving or
    warming again schedules again: the task is idempotent, and one that fires for a start
    that has since moved later does nothing. Beat's activities_start_task is the safety
    net for a lost message or a broker that was away.
    """

    def schedule() -> None:
        from seckill.tasks import activity_start_task

        start_at = Activity.objects.filter(pk=activity_id).values_list("start_at", flat=True).first()
        if start_at is None:
            return
        try:
            activity_start_task.apply_async(args=[activity_id], eta=start_at)
        except Exception as exc:  # broker away: beat creates the token instead
            logger.warning("start task for activity %s not scheduled, beat will do it: %s", activity_id, exc)

    transaction.on_commit(schedule)


class WarmupError(Exception):
    """The stock could not be (re)loaded into Redis; the message says why and what to do."""


# How long a warm-up keeps taking pictures while the sale moves them (a picture is only
# used when consistent), and, once it wrote records, again for the one that corrects
# them. Well below the lifecycle lock's wait (30 s), so a close waiting for it still runs.
_WARMUP_SECONDS = 10
# Longer than any warm-up or close takes; a holder that dies frees it after this.
_LIFECYCLE_LOCK_TIMEOUT = 300


@dataclass(frozen=True)
class WarmupResult:
    activity_id: int
    remaining: int
    loaded: int
    db_total: int
    db_available: int
    unordered_units: int
    participants: int

    def as_dict(self) -> dict:
        return asdict(self)


def activity_warmup(*, activity_id: int, force: bool = False) -> WarmupResult:
    """Load an activity's stock into Redis and check what was written.

    The stock is always derived: the database's available units, less the safety
    stock, less the reservations still in the log without an order, less the cancelled
    orders whose units Redis has not taken back yet (those are returned right after,
    once each). Before the start that is ``total - safety``; after a Redis restart it is
    what is really left. Participants (live orders and logged reservations) are
    restored first, so nobody can buy twice; those the picture had wrong by the end are
    corrected. A live activity's existing stock is kept
    unless ``force``. One warm-up or close of an activity at a time (a redis-py Lock).
    """
    lock = _lifecycle_lock(activity_id)
    if not lock.acquire():
        raise WarmupError(f"activity {activity_id}: its stock is being loaded or settled by another process; try again")
    try:
        return _activity_warmup(activity_id=activity_id, force=force)
    finally:
        _lock_release(lock)


def _lifecycle_lock(activity_id: int):
    """Warm-ups and the end of a close exclude each other: a warm-up that outlived the
    close's removal of the keys would write a live stock key for an ended activity."""
    return stock_redis().lock(
        ActivityKeys(activity_id).lifecycle_lock, timeout=_LIFECYCLE_LOCK_TIMEOUT, blocking_timeout=30
    )


def _lock_release(lock) -> None:
    try:
        lock.release()
    except redis.exceptions.LockError:
        logger.error("lifecycle lock %s expired before its holder finished", lock.name)


def _activity_warmup(*, activity_id: int, force: bool) -> WarmupResult:
    now = timezone.now()  # one instant: the refusal of a live sale and the read-back agree
    activity, client, layout = _warmable(activity_id=activity_id, force=force, now=now)
    started = now >= activity.start_at
    load = _stock_load(activity, client, layout)
    after = _records_corrected(activity_id, client, layout, load)
    # The units the derivation left out (and those of orders cancelled while the key was
    # missing) go back now, each once (return.lua's ``returned`` set).
    orders_units_return(orders=after.not_returned)
    expected_stock = load.remaining + sum(o.quantity for o in after.not_returned)
    read_stock, read_loaded = _read_back(client, layout, stock=expected_stock, loaded=load.loaded, started=started)
    Activity.objects.filter(pk=activity_id).exclude(status=Activity.Status.ENDED).update(
        status=Activity.Status.WARMED, warmed_at=timezone.now(), redis_identity=stock_identity(client, layout)
    )
    activity_snapshot_fill(activity_id)  # the first buyers find the activity cached
    activity_start_schedule(activity_id=activity_id)
    return WarmupResult(
        activity_id=activity_id,
        remaining=read_stock,
        loaded=read_loaded,
        db_total=load.db["db_total"],
        db_available=load.db["db_available"],
        unordered_units=load.unordered_units,
        participants=load.participants,
    )


def _warmable(*, activity_id: int, force: bool, now: datetime) -> tuple[Activity, StockRedis, StockLayout]:
    """The activity, its Redis and its layout, or WarmupError: ended, a Redis that could
    lose writes, or a live stock not to be replaced without ``force``."""
    activity = Activity.objects.get(pk=activity_id)
    if activity.status == Activity.Status.ENDED:
        raise WarmupError(f"activity {activity_id} has ended and been cleaned up; its stock cannot be loaded again")
    client, layout = stock_redis(), StockLayout(activity_id, activity.shards)
    volatile = [] if settings.SECKILL_ALLOW_VOLATILE_REDIS else volatile_reasons(client, layout)
    if volatile:
        raise WarmupError(
            f"the stock Redis could lose reservations without a trace: {'; '.join(volatile)}. "
            "Configure it so, or set SECKILL_ALLOW_VOLATILE_REDIS=true (tests and benchmarks only)."
        )
    current, _ = layout.totals(client)
    if current is not None and now >= activity.start_at and not force:
        raise WarmupError(
            f"activity {activity_id} is on sale and its stock is loaded ({int(current)} left); "
            'recount it from the orders instead ("Recount the stock from the orders", or --force)'
        )
    return activity, client, layout


@dataclass
class _StockLoad:
    """What the warm-up's rounds wrote: the last consistent round's figures."""

    written: bool = False  # the stock itself (a round's compare-and-set won)
    records: dict[int, str] = field(default_factory=dict)  # the participant records, every round's
    remaining: int = 0
    loaded: int = 0
    db: dict = field(default_factory=dict)
    unordered_units: int = 0
    participants: int = 0


def _stock_load(activity: Activity, client: StockRedis, layout: StockLayout) -> _StockLoad:
    """Rounds of picture, derivation and compare-and-set until one writes the stock."""
    epoch = new_epoch()
    load, rounds = _StockLoad(), 0  # rounds: those that wrote records (a consistent picture)
    deadline = time.monotonic() + _WARMUP_SECONDS
    while time.monotonic() < deadline:
        # Redis and the database read as one consistent picture (the reconciliation's).
        # A picture whose Redis moved during the database read mixes two moments (an
        # order committed after the read but acknowledged before the log read is in no
        # term; a cancel returned likewise is in the stock but not in database available):
        # it may serve a report, never a write. The round is lost, nothing is written.
        picture = reconciliation_measure(activity_id=activity.pk)
        if not picture.consistent:
            continue
        rounds += 1
        load.db = db = picture.db
        load.unordered_units = picture.reserved_not_ordered_units
        load.remaining = _derived_remaining(activity, picture)
        participants = _participants(layout, picture=picture)
        layout.records_write(client, participants)
        load.records |= participants
        load.participants = len(participants)
        # Compare-and-set against the stock the picture was taken with: a purchase or a
        # release in between changes it, and the derivation is taken again. (Every step
        # that moves the stock also moves a term of the derivation by as much, so a
        # stock that went away and came back to the same figure is still right.)
        load.loaded = activity.redis_loaded_units + db["db_reserve_released"]  # and the reserve Redis was given
        load.written = layout.warm(
            client,
            picture=picture.redis,
            remaining=load.remaining,
            loaded=load.loaded,
            reserve=db["db_reserve_left"],
            handed=db["db_reserve_released"],
            epoch=epoch,
        )
        if load.written:
            break
    if not rounds:
        raise WarmupError(f"activity {activity.pk}: the stock kept changing while it was loaded; try again")
    return load


def _derived_remaining(activity: Activity, picture: Measurement) -> int:
    """The units Redis sells, from a consistent picture (``activity_warmup`` says how)."""
    db = picture.db
    if db["db_total"] != activity.total_stock:
        raise WarmupError(f"database stock total {db['db_total']} differs from the activity's {activity.total_stock}")
    unordered_units = picture.reserved_not_ordered_units
    not_returned_units = sum(o.quantity for o in picture.not_returned)
    # Redis's share only: the reserve (``db_reserve_left``) is never in Redis.
    redis_share = db["db_available"] - db["db_reserve_left"]
    remaining = redis_share - activity.safety_stock - unordered_units - not_returned_units
    if remaining < 0:
        raise WarmupError(
            f"cannot load the stock: database available {db['db_available']} - reserve {db['db_reserve_left']} "
            f"- safety {activity.safety_stock} "
            f"- unordered reservations {unordered_units} - cancelled units not yet returned "
            f"{not_returned_units} is negative; reconcile first"
        )
    return remaining


def _records_corrected(activity_id: int, client: StockRedis, layout: StockLayout, load: _StockLoad) -> Measurement:
    """The participant records set right by a picture taken after every write; that picture.

    A record written from an older picture whose shopper cancelled, was released or
    bought again since is corrected, winning round or not, so a re-warm leaves nobody
    blocked who may buy again. Consistent too: a mixed one can miss a shopper whose
    reservation became an order in between, and the correction would free someone who
    holds a live order."""
    after = _consistent_picture(activity_id)
    if after is None:
        # Cancelled orders the derivation left out stay for reconciliation to return.
        raise WarmupError(
            f"activity {activity_id}: the stock kept changing; the participants written may be stale, load it again"
        )
    layout.records_correct(client, load.records, _participants(layout, picture=after))
    if not load.written:
        raise WarmupError(f"activity {activity_id}: the stock kept changing while it was loaded; try again")
    return after


def _read_back(client: StockRedis, layout: StockLayout, *, stock: int, loaded: int, started: bool) -> tuple[int, int]:
    """What Redis holds now (stock, loaded units), or WarmupError if it is not what was
    written. Once the sale runs, purchases may already have moved the stock; the loaded
    units may not move."""
    read_stock, read_loaded = layout.totals(client)
    if (
        read_stock is None
        or read_loaded is None
        or int(read_loaded) != loaded
        or (not started and int(read_stock) != stock)
    ):
        raise WarmupError(
            f"read-back mismatch: Redis holds stock={read_stock!r} loaded={read_loaded!r}, "
            f"expected {stock} and {loaded}"
        )
    return int(read_stock), int(read_loaded)


def _consistent_picture(activity_id: int):
    """A consistent picture, or None if none came within ``_WARMUP_SECONDS``."""
    deadline = time.monotonic() + _WARMUP_SECONDS
    while time.monotonic() < deadline:
        picture = reconciliation_measure(activity_id=activity_id)
        if picture.consistent:
            return picture
    return None


def _participants(layout: StockLayout, *, picture: Measurement) -> dict[int, str]:
    """Who holds a live order or a logged reservation, and the record naming it."""
    live = Order.objects.filter(activity_id=layout.activity_id, status__in=Order.LIVE_STATUSES)
    participants = {u: layout.record(s, r) for u, s, r in live.values_list("user_id", "shard", "reservation_id")}
    participants.update({e.user_id: layout.record(e.shard, e.reservation_id) for e in picture.unordered})
    return participants


def stock_redis_refusal() -> str | None:
    """Why the web tier must not start on this stock Redis (None: it may). Redis away at
    start-up is not a reason: the breaker answers for it."""
    if settings.SECKILL_ALLOW_VOLATILE_REDIS:
        return None
    try:
        volatile = volatile_reasons(stock_redis())
    except redis.RedisError:
        return None
    if not volatile:
        return None
    return (
        f"the stock Redis could lose reservations without a trace: {'; '.join(volatile)}. "
        "Configure it so, or set SECKILL_ALLOW_VOLATILE_REDIS=true (tests and benchmarks only)."
    )


def activity_identity_check(*, activity_id: int) -> list[str]:
    """Is the stock Redis still the state the last warm-up wrote (stock.identity)? When
    not — a restart that lost writes, a restore, a failover to a stale replica, a flush —
    nothing sells until the stock is derived again from the database and the log: the
    stock keys are removed first (purchases answer busy), then a forced warm-up derives
    and writes them (a warm-up that fails leaves them removed; beat's auto warm-up tries
    again). Returns the differences found (empty: the same state)."""
    activity = Activity.objects.get(pk=activity_id)
    if activity.status != Activity.Status.WARMED:
        return []
    client, layout = stock_redis(), StockLayout(activity_id, activity.shards)
    differences = identity_differences(activity.redis_identity, stock_identity(client, layout))
    if not differences:
        return []
    # Another server with the same epochs is a restart or a failover that kept every write:
    # routine. An epoch not the warm-up's means writes were lost (a restore, a flush).
    lost = any("epoch" in difference for difference in differences)
    logger.log(
        logging.WARNING if lost else logging.INFO,
        "seckill.redis_identity activity=%s: %s; deriving the stock again",
        activity_id,
        differences,
    )
    for keys in layout.shard_keys:
        client.delete(keys.stock)
    activity_warmup(activity_id=activity_id, force=True)
    return differences


def activity_stock_relayout(*, activity_id: int, old_shards: int) -> int:
    """After a committed change of the shard count of an activity neither warmed nor
    started (``seckill.sale.activities.activity_locked_fields`` refuses it otherwise, before
    the commit, from the database alone: no shopper can have reserved yet): remove the
    stock keys of the old layout (its shards, and its user partitions or users hash) that
    a warm-up which failed part way may have left, so no unit sits in a key the purchase
    no longer reads. The next warm-up lays out the new count. Returns the keys removed."""
    lock = _lifecycle_lock(activity_id)  # no warm-up writes the new layout meanwhile
    if not lock.acquire():
        raise WarmupError(f"activity {activity_id}: its stock is being loaded or settled by another process; try again")
    try:
        if not Activity.objects.filter(pk=activity_id, status=Activity.Status.SCHEDULED).exists():
            return 0  # warmed meanwhile over the new count: its keys are not the old layout's to remove
        client, old = stock_redis(), StockLayout(activity_id, old_shards)
        if any(client.xlen(k.log) for k in old.shard_keys):  # never drop a reservation
            raise WarmupError(f"activity {activity_id}: reservations exist; the old stock keys are kept")
        return old.stock_keys_unlink(client)
    finally:
        _lock_release(lock)


def _activity_relayout_logged(*, activity_id: int, old_shards: int) -> None:
    try:
        activity_stock_relayout(activity_id=activity_id, old_shards=old_shards)
    except (WarmupError, redis.RedisError) as exc:  # reconciliation and the close still see those keys
        logger.error("removing the old stock layout of activity %s failed: %s", activity_id, exc)


def activity_stop_selling(*, activity_id: int) -> None:
    """End the sale now: web processes refuse purchases within their cache lifetime."""
    now = timezone.now()
    Activity.objects.filter(pk=activity_id, end_at__gt=now).update(end_at=now)
    activity_snapshot_forget(activity_id)


def activity_close(*, activity_id: int) -> dict:
    """After the end: turn every reservation into an order, run the final
    reconciliation, then remove the activity's Redis keys.

    The keys are removed only when the log is empty, so no reservation is lost. Orders
    still pending keep their deadline; cancelled later, their units return to the
    database only (orders.services.orders_units_return).
    """
    activity = Activity.objects.get(pk=activity_id)
    # Web processes may act on their cached copy of the activity for one cache lifetime;
    # the database's clock decides, as it does for the start (activity_token_ensure).
    settle = timedelta(seconds=settings.SECKILL_ACTIVITY_CACHE_TTL + 1)
    if not Activity.objects.filter(pk=activity_id, end_at__lte=Now() - settle).exists():
        raise WarmupError(f"activity {activity_id} has not ended (or ended less than a moment ago); try again later")
    replay = reservations_drain(activity_id=activity_id)
    report = reconcile(activity_id=activity_id, final=True)
    # No warm-up may run from here to the removal: one that started before would write
    # the keys again after they are gone, one that starts after finds the activity ended.
    lock = _lifecycle_lock(activity_id)
    if not lock.acquire():
        raise WarmupError(f"activity {activity_id} is being warmed; keys kept, try again")
    try:
        shards = StockLayout(activity_id, activity.shards).shard_keys
        if any(stock_redis().xlen(k.log) for k in shards):
            raise WarmupError(f"activity {activity_id}: reservations still without orders; keys kept, try again")
        # ENDED first: from now on nothing writes the activity's Redis state again.
        Activity.objects.filter(pk=activity_id).update(status=Activity.Status.ENDED)
        activity_snapshot_forget(activity_id)
        try:
            removed = activity_keys_remove(activity_id=activity_id, shards=activity.shards)
        except redis.RedisError:
            # Back to warmed, so that the close task (beat) tries again.
            Activity.objects.filter(pk=activity_id).update(status=Activity.Status.WARMED)
            raise
    finally:
        _lock_release(lock)
    return {"replay": asdict(replay), "reconciliation": report, "keys_removed": removed}


def activity_keys_remove(*, activity_id: int, shards: int | None = None, batch_size: int = 500) -> int:
    """UNLINK every Redis key of an activity, in batches: the known keys, then any other
    key carrying the activity's hash tag (SCAN). UNLINK frees big hashes and streams in
    the background, so even a million participants do not block Redis."""
    client, keys = stock_redis(), ActivityKeys(activity_id)
    if shards is None:
        shards = Activity.objects.filter(pk=activity_id).values_list("shards", flat=True).first() or 1
    removed = StockLayout(activity_id, shards).stock_keys_unlink(client)
    for pattern in keys.scan_patterns:
        batch: list = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= batch_size:
                removed += sum(client.unlink(k) for k in batch)
                batch.clear()
        if batch:
            removed += sum(client.unlink(k) for k in batch)
    return removed
