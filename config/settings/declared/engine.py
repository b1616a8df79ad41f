"""The stock engine's Redis, and what the shop does while it is away.

Declared here, read through config/settings/registry.py (the one table)."""

from ..schema import AT_LEAST_ONE, NOT_NEGATIVE, POSITIVE, Group, Kind, Ref, Setting

GROUPS: tuple[Group, ...] = (
    Group(
        title="The stock engine",
        about="The Redis that holds each sale's stock, its shoppers and the reservation log.",
        settings=(
            Setting(
                name="SECKILL_REDIS_URL",
                kind=Kind.STR,
                default=Ref("REDIS_URL"),
                meaning="The stock engine's Redis (its Lua scripts, the reservation log).",
            ),
            Setting(
                name="SECKILL_REDIS_CLUSTER",
                kind=Kind.BOOL,
                default=False,
                meaning=(
                    "true: `SECKILL_REDIS_URL` names a node of a Redis Cluster, and redis-py's cluster client is used."
                ),
            ),
            Setting(
                name="SECKILL_CLAIM_PENDING_TIMEOUT",
                kind=Kind.FLOAT,
                default=10.0,
                bound=POSITIVE,
                meaning=(
                    "Sharded stock: seconds after which a claim a Redis error left pending is settled (by the "
                    "shopper's next purchase, or reconciliation). Well above the stock Redis's socket timeout, "
                    "so that a purchase in flight is never touched."
                ),
            ),
        ),
    ),
    Group(
        title="While Redis is away",
        about="The circuit breaker and the database path that sells the reserve (docs/OPERATIONS.md).",
        settings=(
            Setting(
                name="SECKILL_BREAKER_FAILURES",
                kind=Kind.INT,
                default=3,
                bound=AT_LEAST_ONE,
                meaning="Redis errors in a row that open the circuit breaker: purchases then take the database path.",
            ),
            Setting(
                name="SECKILL_BREAKER_RESET",
                kind=Kind.FLOAT,
                default=5.0,
                bound=NOT_NEGATIVE,
                meaning="Seconds the open breaker waits before one request probes Redis again.",
            ),
            Setting(
                name="SECKILL_FALLBACK_CONCURRENCY",
                kind=Kind.INT,
                default=4,
                bound=NOT_NEGATIVE,
                meaning=(
                    "Purchases one web process runs on the database path at once; beyond it the answer is 503 busy. "
                    "Keep web processes × this well under the database's connections."
                ),
            ),
        ),
    ),
)
