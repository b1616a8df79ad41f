"""The retry policy of the tasks that turn reservations into orders.

orders.tasks.order_create_task and seckill.tasks.reservations_drain_task share it:
acknowledged after the work, so a dead worker's message is delivered again, and retried
with backoff while the database or Redis is away; past the last retry the replay still
finds the log entries."""

import redis
from django.db import InterfaceError, OperationalError

RESERVATION_TASK_OPTIONS = {
    "acks_late": True,
    "autoretry_for": (OperationalError, InterfaceError, redis.RedisError),
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 10,
}
