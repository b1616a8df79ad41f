"""Every setting of the shop's own, declared once: name, type, default, meaning and bound.

config/settings/base.py reads them from the environment through ``settings_read`` (a value
outside its bound stops the start-up with ImproperlyConfigured naming the variable);
``python -m config.settings.reference`` writes docs/reference/settings.md and the settings
block of .env.example from this table, and tests/test_settings_reference.py fails when
either differs, or when the code reads a ``SECKILL_*`` name the table does not declare.

Django's own settings (``DJANGO_*``), the servers' URLs and the payment provider's settings
(their defaults differ between environments; production.py checks them) stay in base.py.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

# Every answer a web process gives from its own memory describes a moment at most this long
# ago (docs/API.md: a refusal is true at some moment of its request, less this bound). A
# promise of the API, not a knob: exported as the setting SECKILL_MEMORY_BOUND, never read
# from the environment.
MEMORY_BOUND = 1.0
FIXED = {"SECKILL_MEMORY_BOUND": MEMORY_BOUND}

# The form seckill.models.validate_rate accepts (an activity's own rates in admin; a test
# holds the two the same): at least one request per window, a window of at least one period.
RATE_RE = re.compile(r"^0*[1-9]\d*/(0*[1-9]\d*)?[smhd]\Z")
_TRUE = frozenset({"true", "on", "ok", "y", "yes", "1"})  # what django-environ reads as true
_FALSE = frozenset({"false", "off", "n", "no", "0", ""})


class Kind(enum.Enum):
    """What a value is, as the reference page names it."""

    STR = "string"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    PATH = "path"
    RATE = "rate"


def _rate(raw: str) -> str:
    if raw and raw != "off" and not RATE_RE.match(raw):
        raise ValueError(raw)
    return raw


def _bool(raw: str) -> bool:
    if raw.lower() not in _TRUE | _FALSE:
        raise ValueError(raw)
    return raw.lower() in _TRUE


_PARSE: dict[Kind, Callable[[str], Any]] = {
    Kind.STR: str,
    Kind.BOOL: _bool,
    Kind.INT: int,
    Kind.FLOAT: float,
    Kind.PATH: Path,
    Kind.RATE: _rate,
}
_FORM = {
    Kind.STR: "a string",
    Kind.BOOL: "true or false",
    Kind.INT: "an integer",
    Kind.FLOAT: "a number",
    Kind.PATH: "a path",
    Kind.RATE: 'a rate such as "10/s", "600/m" or "100/5m", or "off"',
}


@dataclass(frozen=True)
class Bound:
    """What a number must be, in words and as a test."""

    text: str
    holds: Callable[[float], bool]
    why: str = ""


POSITIVE = Bound("> 0", lambda value: value > 0)
AT_LEAST_ONE = Bound("≥ 1", lambda value: value >= 1)
NOT_NEGATIVE = Bound("≥ 0", lambda value: value >= 0)
PERCENT = Bound("0 to 100", lambda value: 0 <= value <= 100)
FRACTION = Bound("between 0 and 1", lambda value: 0 < value < 1)
MEMORY = Bound(
    f"0 to {MEMORY_BOUND:g} (SECKILL_MEMORY_BOUND)",
    lambda value: 0 <= value <= MEMORY_BOUND,
    why=f"a web process's memory may be at most {MEMORY_BOUND:g} s old (docs/API.md), "
    "or a refusal could describe a sale long past",
)


@dataclass(frozen=True)
class Ref:
    """A default that is another setting's value (SECKILL_REDIS_URL: REDIS_URL's)."""

    name: str


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    default: object
    meaning: str
    bound: Bound | None = None

    def read(self, env: Any, *, default: object, project_dir: Path, refs: Mapping[str, object]) -> Any:
        """This setting's value from the environment (django-environ's ``env``: .env files
        and ``$OTHER`` proxies), else ``default``; ImproperlyConfigured when it is not of its
        kind or outside its bound."""
        if isinstance(default, Ref):
            default = refs[default.name]
        raw = env.str(self.name, default=None)
        value: Any
        if raw is None:
            value = default
        else:
            try:
                value = _PARSE[self.kind](raw.strip())
            except ValueError:
                raise ImproperlyConfigured(f"{self.name}={raw!r} is not {_FORM[self.kind]}.") from None
        if self.kind is Kind.PATH:
            value = project_dir / value  # a relative path is the project directory's
        if self.bound is not None and not self.bound.holds(value):
            why = f": {self.bound.why}" if self.bound.why else ""
            raise ImproperlyConfigured(f"{self.name} is {value!r}; it must be {self.bound.text}{why}.")
        return value


@dataclass(frozen=True)
class Group:
    """Settings that belong together: one table of the reference page."""

    title: str
    about: str
    settings: tuple[Setting, ...]


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
    Group(
        title="Payments",
        about=(
            "Deadlines, throttles and notifications. The provider itself (`PAYMENT_PROVIDER`, `PAYMENT_HOST`, "
            "`STRIPE_*`…) is set in .env.example and checked by config/settings/production.py."
        ),
        settings=(
            Setting(
                name="SECKILL_DEFAULT_PAY_TIMEOUT",
                kind=Kind.INT,
                default=15 * 60,
                bound=AT_LEAST_ONE,
                meaning="Seconds a shopper has to pay, for new activities (each keeps its own).",
            ),
            Setting(
                name="SECKILL_EXPIRY_SWEEP_INTERVAL",
                kind=Kind.FLOAT,
                default=30.0,
                bound=POSITIVE,
                meaning=(
                    "Seconds between beat's sweeps of pending orders past their deadline (the deadline tasks' safety "
                    "net)."
                ),
            ),
            Setting(
                name="SECKILL_PAY_RATE_PER_USER",
                kind=Kind.RATE,
                default="20/m",
                meaning=(
                    "A shopper's pay calls, API and pages (off with all throttles: `DJANGO_THROTTLES_ENABLED=false`)."
                ),
            ),
            Setting(
                name="SECKILL_CANCEL_RATE_PER_USER",
                kind=Kind.RATE,
                default="20/m",
                meaning="A shopper's cancel calls, API and pages.",
            ),
            Setting(name="PAYMENT_CURRENCY", kind=Kind.STR, default="CNY", meaning="The currency of payments."),
            Setting(
                name="PAYMENT_NOTIFICATION_WINDOW",
                kind=Kind.INT,
                default=300,
                bound=AT_LEAST_ONE,
                meaning="Seconds a payment notification's time may be off before it is refused (replays).",
            ),
            Setting(
                name="PAYMENT_RETRY_AFTER",
                kind=Kind.INT,
                default=30,
                bound=AT_LEAST_ONE,
                meaning="Retry-After (seconds) of the 503 payments_unavailable answered when the provider fails.",
            ),
        ),
    ),
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
SETTINGS = tuple(setting for group in GROUPS for setting in group.settings)
BY_NAME = {setting.name: setting for setting in SETTINGS}


def settings_read(
    env: Any,
    *,
    project_dir: Path,
    refs: Mapping[str, object] | None = None,
    defaults: Mapping[str, object] | None = None,
    names: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The settings of the table (or only ``names``) from the environment, checked.

    ``defaults`` replaces the table's default of some (the test settings turn memories and
    limits off unless the environment says otherwise); ``refs`` gives the values the
    ``Ref`` defaults name."""
    defaults = defaults or {}
    chosen = SETTINGS if names is None else [BY_NAME[name] for name in names]
    return {
        setting.name: setting.read(
            env, default=defaults.get(setting.name, setting.default), project_dir=project_dir, refs=refs or {}
        )
        for setting in chosen
    }
