"""Waiting-room sales for the tests: a live or upcoming activity whose admission is the room."""

import pytest

from seckill.models import Activity
from seckill.sale.snapshot import activity_snapshot, activity_snapshot_forget

from ..factories import make_activity


def room_sale(*, stock: int = 10, started: bool = True, shards: int = 1, **room) -> Activity:
    """A warmed activity with the waiting room; ``room``: room_rate, room_cap, room_window_seconds,
    start_at… (written straight to the row: the test settings cache no activity)."""
    activity = make_activity(stock=stock, started=started, shards=shards)
    fields = {"admission_mode": Activity.AdmissionMode.ROOM, "room_rate": 1000, "room_cap": 0, **room}
    Activity.objects.filter(pk=activity.pk).update(**fields)
    activity_snapshot_forget(activity.pk)
    activity.refresh_from_db()
    return activity


def snapshot_of(activity: Activity):
    snapshot = activity_snapshot(activity.pk)
    assert snapshot is not None
    return snapshot


@pytest.fixture
def redis_spy(monkeypatch):
    """Every Redis command this process sends (scripts included), as (name, first argument)."""
    import redis

    sent: list[tuple[str, object]] = []
    command = redis.Redis.execute_command

    def counting(self, *args, **kwargs):
        sent.append((str(args[0]).upper(), args[1] if len(args) > 1 else None))
        return command(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "execute_command", counting)
    execute = redis.client.Pipeline.execute

    def counting_pipeline(self, *args, **kwargs):
        sent.extend((str(c[0][0]).upper(), c[0][1] if len(c[0]) > 1 else None) for c in self.command_stack)
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counting_pipeline)
    return sent


@pytest.fixture(autouse=True)
def joins_unlimited(settings):
    """The per-address join limit is off unless a test is about it (many shoppers share 127.0.0.1 here)."""
    settings.SECKILL_ROOM_JOINS_PER_IP = "off"
