import os

from celery import Celery
from celery.signals import beat_init, worker_init

# Production unless told otherwise: development and tests choose their settings explicitly.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
@beat_init.connect
def _refuse_unsafe_settings(**kwargs) -> None:
    """Django's checks do not run in a worker or beat: the start-up safety check does."""
    from core.safety import refuse_unsafe_settings

    refuse_unsafe_settings()
