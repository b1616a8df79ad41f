import redis
from celery import shared_task
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from seckill.scripts import LogEntry

from .services import orders_create_from_reservations, orders_expire, orders_expire_overdue


@shared_task(
    acks_late=True,
    autoretry_for=(OperationalError, InterfaceError, redis.RedisError),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=10,
)
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
def orders_expire_task(self, order_ids: list[int]) -> int:
    """The payment deadline of a batch of orders (scheduled with eta = the deadline).
    Delivered early (clock skew between hosts), it waits for the rest; if it never runs
    the sweeper cancels them."""
    outcome = orders_expire(order_ids=order_ids)
    if outcome.next_deadline is not None:
        wait = (outcome.next_deadline - timezone.now()).total_seconds()
        raise self.retry(countdown=max(0.5, wait), max_retries=None)
    return outcome.cancelled


@shared_task
def orders_expire_overdue_task() -> int:
    """The sweeper: the safety net of the deadline tasks (lost messages, broker outages)."""
    return orders_expire_overdue()
