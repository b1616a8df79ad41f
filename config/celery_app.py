import logging
import os
from pathlib import Path

from celery import Celery
from celery.signals import beat_init, worker_init, worker_ready

# Production unless told otherwise: development and tests choose their settings explicitly.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Beat entries at least this frequent are routine ticks: their sending, receipt and
# success are not logged one by one (their failures, retries and own messages are).
ROUTINE_TICK_SECONDS = 60.0


def routine_tasks() -> frozenset[str]:
    """The task names beat runs every ROUTINE_TICK_SECONDS or more often."""
    from django.conf import settings

    found = set()
    for entry in getattr(settings, "CELERY_BEAT_SCHEDULE", {}).values():
        every = entry.get("schedule")
        if isinstance(every, int | float) and every <= ROUTINE_TICK_SECONDS:
            found.add(entry["task"])
    return frozenset(found)


class RoutineTickFilter(logging.Filter):
    """Drops beat's "Sending due task" line and the worker's "received" / "succeeded"
    lines of the routine ticks: every 2 s they buried what happened (and the admin
    password) under thousands of lines."""

    def __init__(self) -> None:
        super().__init__()
        self._tasks: frozenset[str] | None = None

    def _task_of(self, record: logging.LogRecord) -> str | None:
        if record.name == "celery.beat" and record.msg.startswith("Scheduler: Sending due task"):
            args = record.args if isinstance(record.args, tuple) else ()
            return str(args[1]) if len(args) > 1 else None
        if record.name in ("celery.app.trace", "celery.worker.strategy") and isinstance(record.args, dict):
            message = str(record.msg)
            if message.endswith("] received") or " succeeded in " in message:
                return str(record.args.get("name"))
        return None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        task = self._task_of(record)
        if task is None:
            return True
        if self._tasks is None:
            self._tasks = routine_tasks()
        return task not in self._tasks


_routine_ticks = RoutineTickFilter()
for _name in ("celery.beat", "celery.app.trace", "celery.worker.strategy"):
    logging.getLogger(_name).addFilter(_routine_ticks)


@worker_init.connect
@beat_init.connect
def _refuse_unsafe_settings(**kwargs) -> None:
    """Django's checks do not run in a worker or beat: the start-up safety check does."""
    from core.safety import refuse_unsafe_settings

    refuse_unsafe_settings()


def _mark_ready(name: str) -> None:
    # `make run` (devtools.stack) prints its "ready" banner once web, worker and beat are up.
    folder = os.environ.get("SECKILL_READY_DIR")
    if folder:
        Path(folder, name).touch()


@worker_ready.connect
def _worker_ready(**kwargs) -> None:
    _mark_ready("worker")


@beat_init.connect
def _beat_ready(**kwargs) -> None:
    _mark_ready("beat")
