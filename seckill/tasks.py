"""Periodic safety nets (beat) and scheduled steps of an activity's life."""

import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta

import redis
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from core.task_policy import RESERVATION_TASK_OPTIONS
from seckill.models import Activity
from seckill.purchase.fallback import reserve_participants_sync
from seckill.purchase.token_cache import token_shared_fill_due
from seckill.room.status import room_ticks
from seckill.sale.activities import activity_token_ensure
from seckill.sale.lifecycle import WarmupError, activity_close, activity_identity_check, activity_warmup
from seckill.sale.reconciliation import reconcile
from seckill.sale.replay import reservations_drain, reservations_replay
from seckill.sale.selectors import redis_remaining
from seckill.sale.snapshot import activity_shards, live_activities
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_backlog

logger = logging.getLogger(__name__)


@shared_task(**RESERVATION_TASK_OPTIONS)
def reservations_drain_task(activity_id: int) -> dict:
    """Create the orders of every reservation in the log, in batches, for as long as
    reservations keep coming (up to SECKILL_DRAIN_TASK_SECONDS).

    While it works, the drain flag stays set (its lifetime renewed before every pass), so
    a flood's purchases publish nothing: one message per burst, not one per small drain.
    The flag is cleared only when a pass finds nothing new, and then the log is read once
    more: a reservation appended before the clear saw the flag and asked no one, so this
    last pass takes it; one appended after sets the flag again and asks for the next task.
    While a flood lasts, the task waits between passes (``_flood_waited``).
    Sharded stock (S > 1): every shard has its flag (one slot per script)."""
    client = stock_redis()
    flags = [keys.drain for keys in ActivityKeys(activity_id).shards(activity_shards(activity_id))]
    deadline = time.monotonic() + settings.SECKILL_DRAIN_TASK_SECONDS

    def claim() -> None:
        for flag in flags:  # set, not just renewed: a task from elsewhere (a retry) claims it too
            client.set(flag, "1", px=settings.SECKILL_DRAIN_KICK_TTL_MS)

    totals: dict[str, int] = {}
    while True:
        claim()
        outcome = asdict(reservations_drain(activity_id=activity_id))
        _add(totals, outcome)
        done = outcome["created"] + outcome["released"]
        if not done or time.monotonic() > deadline:
            break
        if settings.SECKILL_DRAIN_FLOOD_DEFER > 0 and settings.SECKILL_DRAIN_PASS_PAUSE > 0:
            _flood_waited(activity_id, claim, deadline)  # a rate needs a pause to be measured over
        elif done < settings.SECKILL_ORDER_BATCH_SIZE:
            # A trickle: let a batch gather rather than pay a pass per few reservations.
            time.sleep(settings.SECKILL_DRAIN_PASS_PAUSE)
    client.delete(*flags)
    _add(totals, asdict(reservations_drain(activity_id=activity_id)))
    return totals


def _flood_waited(activity_id: int, claim: Callable[[], None], deadline: float) -> None:
    """Between two passes: a pause (a trickle gathers into a batch), then more pauses for
    as long as reservations keep coming at a flood's rate (a batch a second or more) and
    the oldest waiting one is younger than SECKILL_DRAIN_FLOOD_DEFER. The flood's purchases
    keep the cores: on a machine the web tier shares with the worker and PostgreSQL, the
    purchases' tail latency is the drain running beside them, whatever its priority
    (docs/DESIGN-NOTES.md). The flag stays claimed meanwhile, so no purchase asks for
    another task; the orders come after the flood, in full batches."""
    pause = settings.SECKILL_DRAIN_PASS_PAUSE
    flood = settings.SECKILL_ORDER_BATCH_SIZE * pause  # new reservations per pause
    defer_ms = settings.SECKILL_DRAIN_FLOOD_DEFER * 1000
    before = reservations_backlog(activity_id=activity_id)
    while True:
        time.sleep(pause)
        claim()
        now = reservations_backlog(activity_id=activity_id)
        if (
            now.entries - before.entries < flood
            or now.oldest_ms is None
            or time.time() * 1000 - now.oldest_ms >= defer_ms
            or time.monotonic() + pause > deadline
        ):
            return
        before = now


def _add(totals: dict[str, int], outcome: dict) -> None:
    for name, value in outcome.items():
        if name != "activity_id":
            totals[name] = totals.get(name, 0) + value


@shared_task
def reservations_replay_task() -> dict:
    """Create the orders of reservations still without one after the grace period."""
    results = {}
    for activity_id in Activity.objects.filter(status=Activity.Status.WARMED).values_list("pk", flat=True):
        outcome = reservations_replay(activity_id=activity_id)
        if outcome.seen:
            logger.info("replay: %s", outcome)
        results[activity_id] = outcome.created
    return results


@shared_task(bind=True, max_retries=20)
def activity_start_task(self, activity_id: int) -> bool:
    """At the activity's start (scheduled with eta by activity_start_schedule): create
    the purchase token, which turns the flag on."""
    start_at = Activity.objects.filter(pk=activity_id).values_list("start_at", flat=True).first()
    if start_at is None:
        return False
    early = (start_at - timezone.now()).total_seconds()
    if early > 0:
        if early < 5:  # delivered a moment before the start: wait for it
            raise self.retry(countdown=early)
        return False  # the start moved later; the save that moved it scheduled another task
    return activity_token_ensure(activity_id=activity_id) is not None


@shared_task
def activities_start_task() -> None:
    """Create the purchase token of activities that have started (safety net for the
    web processes, which also create it on the first request after the start)."""
    now = timezone.now()
    due = Activity.objects.filter(purchase_token__isnull=True, start_at__lte=now, end_at__gt=now)
    for activity_id in due.values_list("pk", flat=True):
        activity_token_ensure(activity_id=activity_id, now=now)


@shared_task
def activities_autowarm_task() -> None:
    """Warm activities about to start, and re-warm live ones whose Redis stock vanished
    (a Redis restarted empty): derived from the database and the log, never from total.
    While one is near or live, fill the shared token cache when it is due
    (SECKILL_TOKEN_AUTO_FILL)."""
    now = timezone.now()
    lead = timedelta(seconds=settings.SECKILL_AUTO_WARMUP_LEAD)
    candidates = Activity.objects.filter(start_at__lte=now + lead, end_at__gt=now).exclude(status=Activity.Status.ENDED)
    near = list(candidates.only("pk", "status"))
    for activity in near:
        try:
            if activity.status == Activity.Status.SCHEDULED or redis_remaining(activity.pk) is None:
                result = activity_warmup(activity_id=activity.pk, force=True)
                logger.info("auto warm-up: %s", result)
        except (WarmupError, redis.RedisError) as exc:
            logger.error("auto warm-up of activity %s failed: %s", activity.pk, exc)
    if near and settings.SECKILL_TOKEN_AUTO_FILL:
        # After the stock: a sale's first shoppers then cost no database look-up, even
        # when nobody ran token_cache_fill (or the cache Redis restarted empty).
        try:
            filled = token_shared_fill_due()
        except redis.RedisError as exc:
            logger.error("auto token cache fill failed, the next run retries: %s", exc)
        else:
            if filled is not None:
                logger.info("auto token cache fill: %d tokens cached", filled)


@shared_task
def activities_close_task() -> None:
    """Close activities past their end: drain the log, reconcile, remove Redis keys."""
    now = timezone.now()
    for activity_id in Activity.objects.filter(status=Activity.Status.WARMED, end_at__lte=now).values_list(
        "pk", flat=True
    ):
        try:
            activity_close(activity_id=activity_id)
        except (WarmupError, redis.RedisError) as exc:
            logger.error("closing activity %s failed, will retry: %s", activity_id, exc)
        except Exception:  # one activity's failure must not keep the others open
            logger.exception("seckill.close.failed activity=%s; the next run retries", activity_id)


@shared_task(bind=True, max_retries=10, default_retry_delay=3)
def activity_close_task(self, activity_id: int) -> dict:
    try:
        return activity_close(activity_id=activity_id)
    except (WarmupError, redis.RedisError) as exc:
        raise self.retry(exc=exc) from exc


@shared_task
def reconcile_live_task() -> dict:
    """Reconcile every live activity (beat, every SECKILL_RECONCILE_INTERVAL seconds);
    the final run of an activity happens when it is closed (activity_close).

    First, the shoppers of database-path orders get their records in Redis (a web
    process writes them when its breaker's probe runs, but only a purchase runs the
    probe: when no purchase follows an outage, nothing else would)."""
    try:
        reserve_participants_sync()
    except redis.RedisError as exc:
        logger.warning("database-path shoppers' records not written, the next run retries: %s", exc)
    results = {}
    for activity_id in live_activities().filter(status=Activity.Status.WARMED).values_list("pk", flat=True):
        try:
            activity_identity_check(activity_id=activity_id)  # a lost or rolled-back Redis first
            report = reconcile(activity_id=activity_id)
        except (RuntimeError, redis.RedisError, WarmupError) as exc:
            logger.error("reconciliation of activity %s failed, next run retries: %s", activity_id, exc)
            continue
        except Exception:  # one activity's failure must not stop the others' checks
            logger.exception("seckill.reconcile.failed activity=%s; the next run retries", activity_id)
            continue
        results[activity_id] = report["identity_ok"]
    return results


@shared_task
def room_ticks_task() -> dict:
    """Every live waiting room moves on (lets shoppers in, closes at the sell-out) every
    second, whether or not anyone reads its status (beat, SECKILL_ROOM_TICK_INTERVAL)."""
    return room_ticks()
