"""The sale's lifecycle and the way from a reservation to an order.

Declared here, read through config/settings/registry.py (the one table)."""

from ..schema import AT_LEAST_ONE, NOT_NEGATIVE, PERCENT, POSITIVE, Group, Kind, Setting

GROUPS: tuple[Group, ...] = (
    Group(
        title="The sale's lifecycle",
        about="What beat does before, during and after a sale, and a new activity's defaults.",
        settings=(
            Setting(
                name="SECKILL_AUTO_WARMUP_LEAD",
                kind=Kind.INT,
                default=300,
                bound=NOT_NEGATIVE,
                meaning="Seconds before its start that beat warms an activity up (its stock into Redis).",
            ),
            Setting(
                name="SECKILL_AUTOWARM_INTERVAL",
                kind=Kind.FLOAT,
                default=15.0,
                bound=POSITIVE,
                meaning=(
                    "Seconds between beat's warm-ups of activities about to start and re-warms of live ones Redis lost."
                ),
            ),
            Setting(
                name="SECKILL_RECONCILE_INTERVAL",
                kind=Kind.FLOAT,
                default=10.0,
                bound=POSITIVE,
                meaning="Seconds between reconciliations of each live activity (beat); the last one runs at its close.",
            ),
            Setting(
                name="SECKILL_DB_RESERVE_PERCENT",
                kind=Kind.INT,
                default=2,
                bound=PERCENT,
                meaning=(
                    "The database reserve of an activity saved without one, in percent of its total: the units the "
                    "database path may sell while Redis is away (Redis never holds them)."
                ),
            ),
        ),
    ),
    Group(
        title="From reservation to order",
        about="The drain task turns reservations into orders; the replay creates those a lost task left behind.",
        settings=(
            Setting(
                name="SECKILL_REPLAY_GRACE",
                kind=Kind.INT,
                default=30,
                bound=NOT_NEGATIVE,
                meaning="Seconds a reservation may wait for its order before the replay creates it.",
            ),
            Setting(
                name="SECKILL_REPLAY_MAX_ATTEMPTS",
                kind=Kind.INT,
                default=5,
                bound=AT_LEAST_ONE,
                meaning="Replay attempts before a reservation's stock is returned and an anomaly opened.",
            ),
            Setting(
                name="SECKILL_REPLAY_INTERVAL",
                kind=Kind.FLOAT,
                default=10.0,
                bound=POSITIVE,
                meaning="Seconds between replay runs (beat).",
            ),
            Setting(
                name="SECKILL_ORDER_BATCH_SIZE",
                kind=Kind.INT,
                default=500,
                bound=AT_LEAST_ONE,
                meaning="Orders the drain task creates per database transaction (docs/DESIGN-NOTES.md).",
            ),
            Setting(
                name="SECKILL_DRAIN_KICK_TTL_MS",
                kind=Kind.INT,
                default=2000,
                bound=AT_LEAST_ONE,
                meaning=(
                    "Milliseconds the drain flag lives: how long a reservation whose drain task was lost (broker "
                    "down, worker killed) waits before the next purchase asks for another."
                ),
            ),
            Setting(
                name="SECKILL_DRAIN_TASK_SECONDS",
                kind=Kind.FLOAT,
                default=20.0,
                bound=POSITIVE,
                meaning=(
                    "Longest a drain task keeps draining a flood before the next purchase asks for a fresh one (so "
                    "the broker's redelivery timeout is never reached)."
                ),
            ),
            Setting(
                name="SECKILL_DRAIN_PASS_PAUSE",
                kind=Kind.FLOAT,
                default=0.1,
                bound=NOT_NEGATIVE,
                meaning=(
                    "Seconds a drain pass that found less than a full batch waits before the next, so a steady stream "
                    "of purchases becomes orders a batch at a time."
                ),
            ),
            Setting(
                name="SECKILL_DRAIN_FLOOD_DEFER",
                kind=Kind.FLOAT,
                default=15.0,
                bound=NOT_NEGATIVE,
                meaning=(
                    "While reservations arrive at a flood's rate, the drain writes no orders, for at most this many "
                    "seconds behind the oldest; 0: orders are written during floods too (workers on machines of "
                    "their own). Keep it below `SECKILL_REPLAY_GRACE` (docs/DESIGN-NOTES.md)."
                ),
            ),
        ),
    ),
)
