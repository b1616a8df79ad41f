"""The waiting room's settings.

Declared here, read through config/settings/registry.py (the one table)."""

from ..schema import POSITIVE, Group, Kind, Setting

GROUPS: tuple[Group, ...] = (
    Group(
        title="The waiting room",
        about="Admissions by queue instead of a free-for-all (docs/WAITING-ROOM.md).",
        settings=(
            Setting(
                name="SECKILL_ROOM_JOINS_PER_IP",
                kind=Kind.RATE,
                default="30/m",
                meaning="Joins of a waiting room per client address (an IPv6 client counts per /64).",
            ),
            Setting(
                name="SECKILL_ROOM_TICK_INTERVAL",
                kind=Kind.FLOAT,
                default=1.0,
                bound=POSITIVE,
                meaning=(
                    "Seconds between beat's ticks of every live waiting room: admissions and the close need no poller."
                ),
            ),
        ),
    ),
)
