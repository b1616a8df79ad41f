"""The web tier, and the switches of development and benchmarks.

Declared here, read through config/settings/registry.py (the one table)."""

from ..schema import AT_LEAST_ONE, NOT_NEGATIVE, POSITIVE, Group, Kind, Setting

GROUPS: tuple[Group, ...] = (
    Group(
        title="The web tier",
        about="The front door, the activity pages and the operator's endpoints.",
        settings=(
            Setting(
                name="SECKILL_TRUSTED_PROXY_HEADER",
                kind=Kind.STR,
                default="",
                meaning=(
                    "The header a trusted proxy or CDN writes the client's address into (e.g. X-Forwarded-For); "
                    "empty: the socket's address is the client's. Rate limits, the waiting room and login throttles "
                    "count by it."
                ),
            ),
            Setting(
                name="SECKILL_TRUSTED_PROXY_COUNT",
                kind=Kind.INT,
                default=1,
                bound=AT_LEAST_ONE,
                meaning=(
                    "How many trusted proxies append to that header: the client is the entry this many from the right."
                ),
            ),
            Setting(
                name="SECKILL_PAGE_MAX_AGE",
                kind=Kind.INT,
                default=30,
                bound=NOT_NEGATIVE,
                meaning="Seconds browsers may keep an activity page.",
            ),
            Setting(
                name="SECKILL_PAGE_S_MAXAGE",
                kind=Kind.INT,
                default=300,
                bound=NOT_NEGATIVE,
                meaning="Seconds shared caches (a CDN) may keep an activity page.",
            ),
            Setting(
                name="SECKILL_PUBLISH_DIR",
                kind=Kind.PATH,
                default="publish",
                meaning=(
                    "Where `manage.py publish` and the admin action write the static activity pages (a CDN's origin); "
                    "relative to the project directory."
                ),
            ),
            Setting(
                name="WEB_STATEMENT_TIMEOUT",
                kind=Kind.FLOAT,
                default=5.0,
                bound=POSITIVE,
                meaning=(
                    "Seconds a statement of the web tier may run, lock waits included (PostgreSQL's statement_timeout "
                    "on its connections): no request waits on the database longer."
                ),
            ),
            Setting(
                name="METRICS_TOKEN",
                kind=Kind.STR,
                default="",
                meaning="Bearer token of /metrics and of /healthz's details; empty: /metrics answers 401 to everyone.",
            ),
        ),
    ),
    Group(
        title="Development and benchmarks",
        about="Never on in a deployment.",
        settings=(
            Setting(
                name="SECKILL_ALLOW_VOLATILE_REDIS",
                kind=Kind.BOOL,
                default=False,
                meaning=(
                    "true: warm-up and start-up accept a stock Redis that may evict keys or keeps nothing on disk (it "
                    "can lose reservations without a trace). Tests and benchmarks only."
                ),
            ),
            Setting(
                name="SECKILL_BENCH_VIEWS",
                kind=Kind.BOOL,
                default=False,
                meaning=(
                    "true: mounts the benchmarks' contrast endpoints (a database-direct purchase) under /api/bench/. "
                    "Only `make bench` turns it on."
                ),
            ),
        ),
    ),
)
