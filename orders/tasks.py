import logging
import time

from celery import shared_task
from django.db import InterfaceError, OperationalError

from core.task_policy import RESERVATION_TASK_OPTIONS
from stock.scripts import LogEntry

from .models import Order
from .services.creation import orders_create_from_reservations
from .services.lifecycle import orders_expire_due, orders_expire_overdue

logger = logging.getLogger(__name__)


@shared_task(**RESERVATION_TASK_OPTIONS)
def order_create_task(activity_id: int, reservation_id: str, user_id: int, quantity: int, shard: int = 0) -> None:
    """Turn one reservation into an order. Idempotent, so a redelivery is harmless;
    if every retry fails the replay task still finds the reservation in the log."""
    orders_create_from_reservations(
        activity_id=activity_id, entries=[LogEntry(reservation_id, user_id, quantity, shard)]
    )


@shared_task(
    bind=True,
    acks_late=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=20,
)
def orders_expire_task(self, activity_id: int, due_second: int) -> int:
    """The payment deadline of the orders of one activity due in one second (scheduled
    with eta = that second). Delivered early, it waits; never run, the sweeper acts."""
    cancelled = orders_expire_due(activity_id=activity_id, due_second=due_second)
    if cancelled is None:
        raise self.retry(countdown=max(0.5, due_second - time.time()), max_retries=None)
    return cancelled


@shared_task
def orders_expire_overdue_task() -> int:
    """The sweeper: the safety net of the deadline tasks (lost messages, broker outages).

    One activity at a time, so that one activity whose stock has drifted (its return
    refused by the database guard) cannot stop every other activity's timeouts; its
    drift is reconciliation's to report."""
    from django.utils import timezone

    overdue = (
        Order.objects.filter(status=Order.Status.PENDING, pay_deadline__lte=timezone.now())
        .values_list("activity_id", flat=True)
        .distinct()
    )
    cancelled = 0
    for activity_id in list(overdue):
        try:
            cancelled += orders_expire_overdue(activity_id=activity_id)
        except (OperationalError, InterfaceError):
            raise  # the database is away: the next beat run tries again
        except Exception:
            logger.exception("seckill.sweeper.failed activity=%s", activity_id)
    return cancelled
