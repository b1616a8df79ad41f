import redis
from celery import shared_task
from django.db import InterfaceError, OperationalError

from seckill.scripts import LogEntry

from .services import orders_create_from_reservations


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
