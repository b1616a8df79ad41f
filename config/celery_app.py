import os

import redis
from celery import Celery
from django.db import InterfaceError, OperationalError

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The tasks that turn reservations into orders (orders.tasks.order_create_task,
# seckill.tasks.reservations_drain_task) share one policy: acknowledged after the work,
# so a dead worker's message is delivered again, and retried with backoff while the
# database or Redis is away; past the last retry the replay still finds the log entries.
RESERVATION_TASK_OPTIONS = {
    "acks_late": True,
    "autoretry_for": (OperationalError, InterfaceError, redis.RedisError),
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 10,
}
