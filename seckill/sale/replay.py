"""The replay: reservations still without an order after a grace period become orders, or give
up after their attempts (units returned, an anomaly opened); the drain does the same without grace."""

import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError

from orders.models import AnomalyOrder
from orders.services.anomalies import anomaly_open
from orders.services.creation import orders_create_from_reservations, reservation_give_up
from stock.layout import activity_shards
from stock.reservations import reservation_attempt, reservations_pending

logger = logging.getLogger(__name__)


@dataclass
class ReplayOutcome:
    activity_id: int
    seen: int = 0
    created: int = 0
    already_done: int = 0
    released: int = 0

    def add(self, batch) -> None:
        """Count a consumer batch's outcome (orders.services.BatchOutcome)."""
        self.created += len(batch.created)
        self.already_done += len(batch.already_done)
        self.released += len(batch.released)


def reservations_replay(*, activity_id: int, grace_seconds: float | None = None) -> ReplayOutcome:
    """Create the orders of reservations older than the grace period that have none.

    Poison reservations (that fail for a reason other than the database being away)
    are retried up to SECKILL_REPLAY_MAX_ATTEMPTS times, then their stock is returned
    and an anomaly opened. A database outage counts no attempt: the orders appear
    when it returns.
    """

    grace = settings.SECKILL_REPLAY_GRACE if grace_seconds is None else grace_seconds
    cutoff_ms = int((time.time() - grace) * 1000)
    outcome = ReplayOutcome(activity_id)
    for shard in range(activity_shards(activity_id)):  # each shard's log in turn
        _replay_shard(activity_id, shard, cutoff_ms, outcome)
    return outcome


def _replay_shard(activity_id: int, shard: int, cutoff_ms: int, outcome: ReplayOutcome) -> None:

    batch_size = settings.SECKILL_ORDER_BATCH_SIZE
    after = None
    while True:
        batch = reservations_pending(
            activity_id=activity_id, after=after, older_than_ms=cutoff_ms, count=batch_size, shard=shard
        )
        if not batch:
            break
        after = batch[-1].reservation_id
        outcome.seen += len(batch)
        try:
            result = orders_create_from_reservations(activity_id=activity_id, entries=batch)
        except (OperationalError, InterfaceError):
            raise  # the database is away: try again later, count nothing
        except DatabaseError:
            result = None
        if result is not None:
            outcome.add(result)
        else:
            _batch_one_by_one(activity_id, batch, outcome)
        if len(batch) < batch_size:
            # A short read: the log held no more then. What arrived since is the next
            # pass's, so that on a busy machine a trickle is ordered a batch at a time
            # (the drain task pauses between passes) instead of a transaction per arrival.
            break


def _batch_one_by_one(activity_id: int, batch: list, outcome: ReplayOutcome) -> None:
    """A batch that failed as a whole: find the poison entries one by one."""
    for entry in batch:
        try:
            outcome.add(orders_create_from_reservations(activity_id=activity_id, entries=[entry]))
        except (OperationalError, InterfaceError):
            raise
        except DatabaseError as exc:
            attempts = reservation_attempt(
                activity_id=activity_id, reservation_id=entry.reservation_id, shard=entry.shard
            )
            logger.warning("replay: reservation %s failed (attempt %s): %s", entry.reservation_id, attempts, exc)
            # Given up in the database first, so that no late task can still order it.
            if attempts >= settings.SECKILL_REPLAY_MAX_ATTEMPTS and reservation_give_up(
                activity_id=activity_id, entry=entry, reason="replay_exhausted"
            ):
                anomaly_open(
                    kind=AnomalyOrder.Kind.REPLAY_EXHAUSTED,
                    activity_id=activity_id,
                    entry=entry,
                    details={
                        "quantity": entry.quantity,
                        "shard": entry.shard,
                        "error": str(exc)[:500],
                        "attempts": attempts,
                    },
                )
                outcome.released += 1


def reservations_drain(*, activity_id: int) -> ReplayOutcome:
    """Turn everything in the log into orders now, whatever its age, in batches (one
    transaction each). The drain task runs it during the sale; closing runs it last."""
    return reservations_replay(activity_id=activity_id, grace_seconds=-1)
