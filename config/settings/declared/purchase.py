"""What a purchase meets before the stock script: the gates, the web process's memories, the shared
copies in the cache Redis and the shoppers' tokens.

Declared here, read through config/settings/registry.py (the one table)."""

from ..schema import AT_LEAST_ONE, FRACTION, MEMORY, MEMORY_BOUND, NOT_NEGATIVE, Group, Kind, Setting

GROUPS: tuple[Group, ...] = (
    Group(
        title="The purchase gates",
        about=(
            "What a purchase passes before the stock script (docs/GATES.md). Each activity may set its own "
            "rates and admission cap in admin; a blank one uses these."
        ),
        settings=(
            Setting(
                name="SECKILL_RATE_PER_USER",
                kind=Kind.RATE,
                default="10/s",
                meaning="Purchases one shopper may attempt, per activity (fixed windows in the cache Redis).",
            ),
            Setting(
                name="SECKILL_RATE_PER_IP",
                kind=Kind.RATE,
                default="off",
                meaning=(
                    "Purchases one client address may attempt, per activity. Off by default: behind a proxy without "
                    "`SECKILL_TRUSTED_PROXY_HEADER` every shopper would share the proxy's address."
                ),
            ),
            Setting(
                name="SECKILL_ADMISSION_RATE",
                kind=Kind.INT,
                default=0,
                bound=NOT_NEGATIVE,
                meaning=(
                    "Purchases per second let through to the stock script, all shoppers together (a token bucket in "
                    "Redis); 0: no cap."
                ),
            ),
            Setting(
                name="SECKILL_ADMISSION_BURST",
                kind=Kind.INT,
                default=0,
                bound=NOT_NEGATIVE,
                meaning="The admission cap's burst; 0: one second's rate.",
            ),
            Setting(
                name="SECKILL_DEVICE_HEADER",
                kind=Kind.STR,
                default="X-Device-Id",
                meaning="The request header the blacklist's device ids come from.",
            ),
            Setting(
                name="SECKILL_CAPTCHA_TTL",
                kind=Kind.INT,
                default=120,
                bound=AT_LEAST_ONE,
                meaning="Seconds a captcha challenge may be answered.",
            ),
        ),
    ),
    Group(
        title="What a web process remembers",
        about=(
            "Answers a web process gives from its own memory, without asking Redis or the database. Each answers for "
            f"the server, so none may last longer than `SECKILL_MEMORY_BOUND` ({MEMORY_BOUND:g} s, fixed: "
            "docs/API.md)."
        ),
        settings=(
            Setting(
                name="SECKILL_SOLD_OUT_TTL",
                kind=Kind.FLOAT,
                default=1.0,
                bound=MEMORY,
                meaning='Seconds a web process answers "sold out" itself after Redis said so.',
            ),
            Setting(
                name="SECKILL_DUPLICATE_TTL",
                kind=Kind.FLOAT,
                default=1.0,
                bound=MEMORY,
                meaning=(
                    'Seconds a web process answers "duplicate" itself to a shopper Redis reserved for or refused as '
                    "one."
                ),
            ),
            Setting(
                name="SECKILL_ACTIVITY_CACHE_TTL",
                kind=Kind.FLOAT,
                default=1.0,
                bound=MEMORY,
                meaning="Seconds a web process keeps its copy of an activity.",
            ),
            Setting(
                name="SECKILL_LIST_CACHE_TTL",
                kind=Kind.FLOAT,
                default=1.0,
                bound=MEMORY,
                meaning="Seconds a web process keeps a page of the sale lists.",
            ),
            Setting(
                name="SECKILL_BLACKLIST_CACHE_TTL",
                kind=Kind.FLOAT,
                default=1.0,
                bound=MEMORY,
                meaning="Seconds a web process keeps the blacklist: a change reaches every process within it.",
            ),
            Setting(
                name="SECKILL_ROOM_STATUS_TTL",
                kind=Kind.FLOAT,
                default=0.5,
                bound=MEMORY,
                meaning="Seconds a web process keeps a waiting room's status: it ticks the room at most once per that.",
            ),
        ),
    ),
    Group(
        title="Copies in the cache Redis",
        about="Copies shared by every web process, so that a flood of requests costs one database read, not one each.",
        settings=(
            Setting(
                name="SECKILL_ACTIVITY_REDIS_TTL",
                kind=Kind.FLOAT,
                default=60.0,
                bound=NOT_NEGATIVE,
                meaning="Seconds an activity's copy lives in the cache Redis; 0: no shared copy.",
            ),
            Setting(
                name="SECKILL_ACTIVITY_ABSENT_TTL",
                kind=Kind.FLOAT,
                default=30.0,
                bound=NOT_NEGATIVE,
                meaning=(
                    "Seconds an unknown activity id is remembered as absent, so made-up ids do not each reach the "
                    "database."
                ),
            ),
            Setting(
                name="SECKILL_CACHE_REBUILD_WAIT",
                kind=Kind.FLOAT,
                default=2.0,
                bound=NOT_NEGATIVE,
                meaning=(
                    "Seconds a request waits for another process's rebuild of a copy before reading the database "
                    "itself."
                ),
            ),
            Setting(
                name="SECKILL_BLACKLIST_REDIS_TTL",
                kind=Kind.FLOAT,
                default=60.0,
                bound=NOT_NEGATIVE,
                meaning="Seconds the blacklist's copy lives in the cache Redis; 0: no shared copy.",
            ),
            Setting(
                name="SECKILL_SHOPPER_CACHE_TTL",
                kind=Kind.INT,
                default=60,
                bound=NOT_NEGATIVE,
                meaning="Seconds what the eligibility rules need of a shopper stays in the cache Redis; 0: not kept.",
            ),
        ),
    ),
    Group(
        title="Shoppers' tokens",
        about="How a purchase knows its shopper without a database query per request.",
        settings=(
            Setting(
                name="SECKILL_TOKEN_CACHE_TTL",
                kind=Kind.FLOAT,
                default=30.0,
                bound=NOT_NEGATIVE,
                meaning=(
                    "Seconds a web process remembers a token's (or session's) shopper: no query per request, and a "
                    "shopper it knows keeps buying while the database is away."
                ),
            ),
            Setting(
                name="SECKILL_TOKEN_SHARED_TTL",
                kind=Kind.INT,
                default=6 * 3600,
                bound=AT_LEAST_ONE,
                meaning=(
                    "Seconds a token stays in the cache Redis shared by all web processes. Deleting the token or "
                    "saving its user inactive removes it at once; a QuerySet.update is seen after this."
                ),
            ),
            Setting(
                name="SECKILL_TOKEN_AUTO_FILL",
                kind=Kind.BOOL,
                default=True,
                meaning=(
                    "While a sale is near or live, beat's warm-up also fills the shared token cache as `manage.py "
                    "token_cache_fill` does, when no fill ran within half of `SECKILL_TOKEN_SHARED_TTL`; false: only "
                    "the command fills it. About 0.1 KB of the cache Redis per shopper."
                ),
            ),
            Setting(
                name="SECKILL_TOKEN_FILTER_ERROR_RATE",
                kind=Kind.FLOAT,
                default=0.001,
                bound=FRACTION,
                meaning=(
                    "The share of made-up tokens the filter of every token's digest (a Bloom filter in the cache "
                    "Redis) lets through to the database."
                ),
            ),
            Setting(
                name="SECKILL_TOKEN_REFUSED_TTL",
                kind=Kind.FLOAT,
                default=10.0,
                bound=NOT_NEGATIVE,
                meaning="Seconds a refused token is answered 401 without the database, in every web process.",
            ),
            Setting(
                name="SECKILL_AUTH_FAILURES_PER_IP",
                kind=Kind.RATE,
                default="30/m",
                meaning="Failed token authentications one client address may make before 429.",
            ),
        ),
    ),
)
