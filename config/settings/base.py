"""Settings shared by every environment; everything configurable comes from the environment."""

from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONE, SELF
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.retry import Retry

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)  # optional, for local overrides

# --- Django core --------------------------------------------------------------
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
# The public secrets of the development settings are refused at start-up unless these
# settings allow them (local and test only): core.safety.deploy_safety_check.
DEVELOPMENT_SECRETS_ALLOWED = False
# Debug pages hide connection URLs (their names and any password inside a value).
DEFAULT_EXCEPTION_REPORTER_FILTER = "core.safety.ConnectionSafeExceptionReporterFilter"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc as static files of this origin
    "axes",
    "csp",
    "payments",
    "inventory",
    "seckill",
    "orders",
]

MIDDLEWARE = [
    # Outermost: a page declared identical for every visitor leaves without per-visitor headers.
    "seckill.middleware.SharedPageMiddleware",
    "server.request_log.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "seckill.metrics.PurchaseOutcomeMiddleware",
    # A view's or a template's database error while the database is away becomes a 503.
    "seckill.middleware.DatabaseAwayMiddleware",
    # The login and password-reset throttles (docs/GATES.md); their 429 page.
    "seckill.throttles.AccountThrottleMiddleware",
    # Last, as django-axes asks: turns a lockout into its 429 answer.
    "axes.middleware.AxesMiddleware",
]
# Requests to /api/ with "Authorization: Token …" (API clients, the flood) take this
# shorter chain: see server/handlers.py for what each left-out middleware would do.
API_MIDDLEWARE = [
    "server.request_log.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "seckill.metrics.PurchaseOutcomeMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Data stores ----------------------------------------------------------------
# DATABASE_URL / REDIS_URL are set by the operator, or by devtools.embedded for the
# embedded servers (the run and test commands put them in the environment).
DATABASE_URL = env("DATABASE_URL", default="")
REDIS_URL = env("REDIS_URL", default="")

DATABASES = {"default": env.db_url_config(DATABASE_URL)} if DATABASE_URL else {}
if DATABASES:
    # Persistent connections: a flash sale must not pay a connection set-up per request.
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DJANGO_CONN_MAX_AGE", default=60))
    # Off by default: a health check is a "SELECT 1" round trip before the first query of
    # every request, which the profile of a flood put at a quarter of a rejection's time
    # (docs/BENCHMARKS.md). Without it, a connection that died (database restarted) fails
    # one request per process and is then replaced; Celery replaces broken connections
    # between tasks, and its tasks retry on OperationalError.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("DJANGO_CONN_HEALTH_CHECKS", default=False)
    # A database that does not answer a connect within seconds is away: the request answers
    # 503 busy rather than waiting with a thread held.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 3)
    # ATOMIC_REQUESTS stays off: the purchase path must never hold a transaction while it talks to Redis.

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Seconds a statement of the web tier may run (PostgreSQL's statement_timeout, lock waits
# included, set on each of its connections by server.app): a request never waits on the
# database longer, and no backend keeps running a statement nobody waits for.
WEB_STATEMENT_TIMEOUT = env.float("WEB_STATEMENT_TIMEOUT", default=5.0)

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "cache",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "SOCKET_CONNECT_TIMEOUT": 1,
            "SOCKET_TIMEOUT": 1,
            # A cache that is down is a miss, not a 500: purchases go on (Redis-down mode).
            "IGNORE_EXCEPTIONS": True,
            # JSON, never pickle: whoever can write to the cache Redis must not run code here.
            "SERIALIZER": "django_redis.serializers.json.JSONSerializer",
            # No automatic retries, as for the stock engine (stock.redis_client.no_retries):
            # a write whose reply was lost may have run, and a miss costs less than a wait.
            # The client's version found once, not per connection (stock.redis_client.DRIVER_INFO).
            "CONNECTION_POOL_KWARGS": {"retry": Retry(NoBackoff(), 0), "driver_info": DriverInfo()},
        },
    }
}

SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
SESSION_SERIALIZER = "django.contrib.sessions.serializers.JSONSerializer"

# --- Auth -----------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Not /admin/ in production: DJANGO_ADMIN_URL (with a trailing slash) hides it from scanners.
ADMIN_URL = env("DJANGO_ADMIN_URL", default="admin/")
# django-axes throttles logins (admin and /accounts/login/ alike): after
# DJANGO_LOGIN_FAILURE_LIMIT failures for one username from one address, that pair is
# locked out (429) for DJANGO_LOGIN_COOLOFF_MINUTES.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("DJANGO_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("DJANGO_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "seckill.gates.client_ip"  # the same trusted-proxy rule as the rate limits
# Throttles (django-ratelimit, fixed windows in the cache Redis; docs/GATES.md): rates such
# as "10/m" or "5/15m"; "off" disables one. The cache away: requests go on.
RATELIMIT_ENABLE = env.bool("DJANGO_THROTTLES_ENABLED", default=True)
RATELIMIT_USE_CACHE = "default"
RATELIMIT_FAIL_OPEN = True
RATELIMIT_RATES = {
    # Every login attempt from one client address, and failed ones for one username.
    "login-address": env("DJANGO_LOGIN_RATE_PER_ADDRESS", default="30/5m"),
    "login-username": env("DJANGO_LOGIN_FAILURES_PER_USERNAME", default="10/15m"),
    # Failures of one (username, address): past the username's limit, one is enough to refuse.
    "login-pair": "1/15m",
    "signup-address": env("DJANGO_SIGNUP_RATE_PER_ADDRESS", default="10/h"),
    "password-reset-address": env("DJANGO_PASSWORD_RESET_RATE_PER_ADDRESS", default="10/h"),
    "password-reset-email": env("DJANGO_PASSWORD_RESET_RATE_PER_EMAIL", default="3/h"),
    # A shopper's pay and cancel calls (API and pages).
    "order-pay": env("SECKILL_PAY_RATE_PER_USER", default="20/m"),
    "order-cancel": env("SECKILL_CANCEL_RATE_PER_USER", default="20/m"),
}
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"

# --- Content Security Policy (django-csp) -----------------------------------------------
# Only this origin's scripts, styles and connections; no inline script or style, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        # No inline style either (styles can leak a page's content): stylesheets are files, and
        # the admin report's SVG charts are images (data: URIs) that carry their own.
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
# The CSRF cookie stays readable by the page's script: API.md's double submit needs it.
CSRF_COOKIE_HTTPONLY = False

# --- I18N -----------------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# The shop's time zone: pages show times in it, the admin reads the times typed in it
# (USE_TZ: stored in UTC). Set DJANGO_TIME_ZONE to the shop's zone; `make run` uses Asia/Shanghai.
TIME_ZONE = env("DJANGO_TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

# --- Static files ---------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# --- REST framework ---------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its "WWW-Authenticate: Token" header makes unauthenticated calls 401.
        "seckill.authentication.CachedTokenAuthentication",
        "seckill.authentication.CachedSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["seckill.parsers.SafeJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 20,
    "EXCEPTION_HANDLER": "seckill.api_errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Flash-sale shop API",
    "DESCRIPTION": "Purchase, result and order endpoints of the flash-sale shop. See docs/API.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery -----------------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = None  # results live in the database (orders), not in Celery
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 4
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A purchase answers 202 whether or not the enqueue succeeds (the reservation log
# holds it), so a publish must fail fast instead of holding the request.
CELERY_TASK_PUBLISH_RETRY = True
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.2}
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 1, "socket_timeout": 2, "visibility_timeout": 3600}
CELERY_TIMEZONE = TIME_ZONE
# One queue name per deployment (or per test run on a shared RabbitMQ).
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_TASK_DEFAULT_QUEUE", default="celery")
CELERY_BEAT_SCHEDULE_FILENAME = str(BASE_DIR / ".local" / "celerybeat-schedule")

# --- The flash sale ---------------------------------------------------------------
# Redis for the stock engine (the Lua scripts); defaults to REDIS_URL.
SECKILL_REDIS_URL = env("SECKILL_REDIS_URL", default=REDIS_URL)
# true: SECKILL_REDIS_URL names a node of a Redis Cluster and redis-py's cluster client is used.
SECKILL_REDIS_CLUSTER = env.bool("SECKILL_REDIS_CLUSTER", default=False)
# true: warm-up and start-up accept a stock Redis that may evict keys or keeps nothing on
# disk (it can lose reservations without a trace): tests and benchmarks only.
SECKILL_ALLOW_VOLATILE_REDIS = env.bool("SECKILL_ALLOW_VOLATILE_REDIS", default=False)
# Seconds a reservation may wait for its order before the replay task creates it.
SECKILL_REPLAY_GRACE = env.int("SECKILL_REPLAY_GRACE", default=30)
# Replay attempts before the stock is returned and an anomaly opened.
SECKILL_REPLAY_MAX_ATTEMPTS = env.int("SECKILL_REPLAY_MAX_ATTEMPTS", default=5)
# How often beat runs the replay (seconds).
SECKILL_REPLAY_INTERVAL = env.float("SECKILL_REPLAY_INTERVAL", default=10.0)
# How often beat warms activities about to start and re-warms live ones Redis lost (seconds).
SECKILL_AUTOWARM_INTERVAL = env.float("SECKILL_AUTOWARM_INTERVAL", default=15.0)
# Lifetime of a web process's copy of an activity (seconds).
SECKILL_ACTIVITY_CACHE_TTL = env.float("SECKILL_ACTIVITY_CACHE_TTL", default=1.0)
# Lifetime of a web process's copy of a page of the sale lists (seconds; seckill.listing).
SECKILL_LIST_CACHE_TTL = env.float("SECKILL_LIST_CACHE_TTL", default=1.0)
# Lifetime of the drain flag (ms): a purchase that finds no flag sets it and publishes one
# drain task; the task keeps it set while it drains and clears it when the log is empty.
# Bounds the wait of a reservation whose task was lost (broker down, worker killed) before
# another purchase asks again; the replay is behind it.
SECKILL_DRAIN_KICK_TTL_MS = env.int("SECKILL_DRAIN_KICK_TTL_MS", default=2000)
# Longest a drain task keeps draining a flood before it ends and lets the next purchase
# ask for a fresh one (bounded, so a broker's redelivery timeout is never reached).
SECKILL_DRAIN_TASK_SECONDS = env.float("SECKILL_DRAIN_TASK_SECONDS", default=20.0)
# A drain pass that found less than a full batch waits this long before the next one, so
# that a steady stream of purchases is turned into orders ~a batch at a time, not one by
# one with a pass's fixed cost each (orders trail purchases by about this much more).
SECKILL_DRAIN_PASS_PAUSE = env.float("SECKILL_DRAIN_PASS_PAUSE", default=0.1)
# While reservations arrive at a flood's rate (a batch a second or more), the drain task
# lets them gather instead of writing orders beside the flood's purchases, for at most this
# many seconds behind the oldest (docs/DESIGN-NOTES.md, "The drain gives way to a flood").
# 0 (or a pass pause of 0): orders are written during the flood too (a worker on machines
# of its own). Below the replay's grace (SECKILL_REPLAY_GRACE), which would otherwise write
# them meanwhile.
SECKILL_DRAIN_FLOOD_DEFER = env.float("SECKILL_DRAIN_FLOOD_DEFER", default=15.0)
# Orders created per database transaction by the drain task (docs/DESIGN-NOTES.md, "The order batch").
SECKILL_ORDER_BATCH_SIZE = env.int("SECKILL_ORDER_BATCH_SIZE", default=500)
# Default payment deadline (seconds) for new activities.
SECKILL_DEFAULT_PAY_TIMEOUT = env.int("SECKILL_DEFAULT_PAY_TIMEOUT", default=15 * 60)
# How often beat reconciles each live activity (seconds); the final run is at close.
SECKILL_RECONCILE_INTERVAL = env.float("SECKILL_RECONCILE_INTERVAL", default=10.0)
# How often beat sweeps pending orders past their deadline (the deadline tasks' safety net).
SECKILL_EXPIRY_SWEEP_INTERVAL = env.float("SECKILL_EXPIRY_SWEEP_INTERVAL", default=30.0)
# Warm-up happens automatically this many seconds before the start (beat).
SECKILL_AUTO_WARMUP_LEAD = env.int("SECKILL_AUTO_WARMUP_LEAD", default=300)

# --- Traffic gates (seckill.gates; docs/GATES.md) ------------------------------------
# Per-shopper and per-client-address purchase limits: fixed windows in the cache Redis
# (rates such as "10/s", "600/m" or "100/5m"; "off" disables; checked at start-up). Each
# activity may override them in admin. The per-IP limit is off by default: behind a proxy
# without SECKILL_TRUSTED_PROXY_HEADER every shopper would share the proxy's address.
# Redis away: requests go on (the database path has its own strict cap).
SECKILL_RATE_PER_USER = env("SECKILL_RATE_PER_USER", default="10/s")
SECKILL_RATE_PER_IP = env("SECKILL_RATE_PER_IP", default="off")
# The header a trusted proxy or CDN writes the client address into (e.g. X-Forwarded-For),
# and how many trusted proxies append to it; unset: the socket address is the client.
SECKILL_TRUSTED_PROXY_HEADER = env("SECKILL_TRUSTED_PROXY_HEADER", default="")
SECKILL_TRUSTED_PROXY_COUNT = env.int("SECKILL_TRUSTED_PROXY_COUNT", default=1)
# Device ids for the blacklist come from this request header.
SECKILL_DEVICE_HEADER = env("SECKILL_DEVICE_HEADER", default="X-Device-Id")
# Global admission cap per activity (token bucket in Redis): purchases per second let
# through to the stock script, and the burst; 0 = no cap (an activity may set its own).
SECKILL_ADMISSION_RATE = env.int("SECKILL_ADMISSION_RATE", default=0)
SECKILL_ADMISSION_BURST = env.int("SECKILL_ADMISSION_BURST", default=0)
# The waiting room (docs/WAITING-ROOM.md): joins per client address, and the seconds a web
# process keeps the room's status (each process ticks the room at most once per that).
SECKILL_ROOM_JOINS_PER_IP = env("SECKILL_ROOM_JOINS_PER_IP", default="30/m")
SECKILL_ROOM_STATUS_TTL = env.float("SECKILL_ROOM_STATUS_TTL", default=0.5)
# Beat ticks every live waiting room this often (seconds): admissions and the close need no poller.
SECKILL_ROOM_TICK_INTERVAL = env.float("SECKILL_ROOM_TICK_INTERVAL", default=1.0)
# Seconds a web process answers "sold out" itself after Redis said so.
SECKILL_SOLD_OUT_TTL = env.float("SECKILL_SOLD_OUT_TTL", default=1.0)
# Seconds a web process answers "duplicate" itself to a shopper Redis reserved for or
# refused as a duplicate (seckill/took_part.py).
SECKILL_DUPLICATE_TTL = env.float("SECKILL_DUPLICATE_TTL", default=1.0)
# Every answer a web process gives from its own memory describes a moment at most this
# long ago (docs/API.md: a refusal is true at some moment of its request, less this bound).
SECKILL_MEMORY_BOUND = 1.0
# The activity copy in the cache Redis, unknown ids remembered as absent, and how long a
# request waits for another process's rebuild before reading the database itself.
SECKILL_ACTIVITY_REDIS_TTL = env.float("SECKILL_ACTIVITY_REDIS_TTL", default=60.0)
SECKILL_ACTIVITY_ABSENT_TTL = env.float("SECKILL_ACTIVITY_ABSENT_TTL", default=30.0)
SECKILL_CACHE_REBUILD_WAIT = env.float("SECKILL_CACHE_REBUILD_WAIT", default=2.0)
SECKILL_BLACKLIST_CACHE_TTL = env.float("SECKILL_BLACKLIST_CACHE_TTL", default=1.0)
SECKILL_BLACKLIST_REDIS_TTL = env.float("SECKILL_BLACKLIST_REDIS_TTL", default=60.0)
for _memory in (
    "SECKILL_SOLD_OUT_TTL",
    "SECKILL_DUPLICATE_TTL",
    "SECKILL_ACTIVITY_CACHE_TTL",
    "SECKILL_LIST_CACHE_TTL",
    "SECKILL_ROOM_STATUS_TTL",
    "SECKILL_BLACKLIST_CACHE_TTL",
):
    if globals()[_memory] > SECKILL_MEMORY_BOUND:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"{_memory} is {globals()[_memory]}: a web process's memory may be at most "
            f"{SECKILL_MEMORY_BOUND} s old (docs/API.md), or a refusal could describe a sale long past."
        )
SECKILL_SHOPPER_CACHE_TTL = env.int("SECKILL_SHOPPER_CACHE_TTL", default=60)
SECKILL_CAPTCHA_TTL = env.int("SECKILL_CAPTCHA_TTL", default=120)
# Seconds a web process remembers a token's (or session's) user: no query per request,
# and a shopper it knows keeps buying through Redis while the database is away.
SECKILL_TOKEN_CACHE_TTL = env.float("SECKILL_TOKEN_CACHE_TTL", default=30.0)
# Seconds a token stays in the cache Redis shared by all web processes (deleting the token
# or saving its user inactive removes it at once; a QuerySet.update is seen after this).
SECKILL_TOKEN_SHARED_TTL = env.int("SECKILL_TOKEN_SHARED_TTL", default=6 * 3600)
# The automatic warm-up (beat) also fills the shared token cache while a sale is near or
# live, when no fill ran within half of SECKILL_TOKEN_SHARED_TTL: what `manage.py
# token_cache_fill` does, for the operator who did not run it (about 0.1 KB of the cache
# Redis per shopper). false: only the command fills it.
SECKILL_TOKEN_AUTO_FILL = env.bool("SECKILL_TOKEN_AUTO_FILL", default=True)
# The filter of every token's digest in the cache Redis (a Bloom filter, sized by
# `manage.py token_cache_fill` for twice the tokens there are): the share of made-up
# tokens it lets through to the database.
SECKILL_TOKEN_FILTER_ERROR_RATE = env.float("SECKILL_TOKEN_FILTER_ERROR_RATE", default=0.001)
# Seconds a refused token is answered 401 without the database, in every web process.
SECKILL_TOKEN_REFUSED_TTL = env.float("SECKILL_TOKEN_REFUSED_TTL", default=10.0)
# Failed token authentications per client address before 429 ("off" disables).
SECKILL_AUTH_FAILURES_PER_IP = env.str("SECKILL_AUTH_FAILURES_PER_IP", default="30/m")

# The activity page: shared caches (a CDN) may keep it this long; browsers a little.
SECKILL_PAGE_MAX_AGE = env.int("SECKILL_PAGE_MAX_AGE", default=30)
SECKILL_PAGE_S_MAXAGE = env.int("SECKILL_PAGE_S_MAXAGE", default=300)
# Where `manage.py publish` and the admin action write the static activity pages (a CDN origin).
SECKILL_PUBLISH_DIR = env.path("SECKILL_PUBLISH_DIR", default=BASE_DIR / "publish")

# --- Payments (django-payments) --------------------------------------------------------
# The provider `POST /api/orders/<no>/pay` starts payments with, and the only one
# registered in PAYMENT_VARIANTS: "simulated", "stripe", or empty (no provider: pay answers
# 503 payments_unavailable, every /payments/process/<variant>/ 404). Production refuses
# "simulated" unless PAYMENT_SIMULATED_ALLOWED=true, and "stripe" without its keys and a
# public PAYMENT_HOST (config/settings/production.py).
PAYMENT_PROVIDER = env("PAYMENT_PROVIDER", default="simulated")
PAYMENT_SIMULATED_ALLOWED = env.bool("PAYMENT_SIMULATED_ALLOWED", default=False)
PAYMENT_MODEL = "orders.Payment"
PAYMENT_CURRENCY = env("PAYMENT_CURRENCY", default="CNY")
# The shop's public host: providers send the shopper back (and webhooks) to it.
PAYMENT_HOST = env("PAYMENT_HOST", default="localhost:8000")
PAYMENT_USES_SSL = env.bool("PAYMENT_USES_SSL", default=not DEBUG)
# Secret the simulated provider signs its notifications with (HMAC-SHA256).
# Empty: the simulated provider answers 503 rather than accept unsigned notifications.
PAYMENT_GATEWAY_SECRET = env("PAYMENT_GATEWAY_SECRET", default="")
# Notifications older or newer than this many seconds are refused (replays).
PAYMENT_NOTIFICATION_WINDOW = env.int("PAYMENT_NOTIFICATION_WINDOW", default=300)
# What a failed provider's 503 payments_unavailable asks the caller to wait (Retry-After).
PAYMENT_RETRY_AFTER = env.int("PAYMENT_RETRY_AFTER", default=30)
PAYMENT_PROVIDERS = ("simulated", "stripe")


def payment_variants(provider: str) -> dict[str, tuple[str, dict]]:
    """PAYMENT_VARIANTS for ``provider``: that provider alone, nothing for an empty or
    unknown name. A variant not registered cannot be loaded, so no webhook reaches it."""
    if provider == "simulated":
        return {"simulated": ("orders.simulated.SimulatedProvider", {})}
    if provider == "stripe":
        # Stripe Checkout (django-payments' StripeProviderV3): the secret key, and the signing
        # secret of the webhook endpoint pointed at /payments/process/stripe/.
        config = {
            "api_key": env("STRIPE_API_KEY", default=""),
            "endpoint_secret": env("STRIPE_ENDPOINT_SECRET", default=""),
            "use_token": True,
        }
        return {"stripe": ("orders.stripe_provider.StripeProvider", config)}
    return {}


PAYMENT_VARIANTS = payment_variants(PAYMENT_PROVIDER)

# Redis circuit breaker: consecutive failures that open it, seconds before one probe.
SECKILL_BREAKER_FAILURES = env.int("SECKILL_BREAKER_FAILURES", default=3)
SECKILL_BREAKER_RESET = env.float("SECKILL_BREAKER_RESET", default=5.0)
# Purchases one web process runs on the database path at once while Redis is away;
# beyond it the answer is 503 busy. Keep processes x cap well under the pool size.
SECKILL_FALLBACK_CONCURRENCY = env.int("SECKILL_FALLBACK_CONCURRENCY", default=4)
# The database reserve of an activity saved without one, in percent of its total: the
# units the database path may sell while Redis is away (Redis never holds them).
SECKILL_DB_RESERVE_PERCENT = env.int("SECKILL_DB_RESERVE_PERCENT", default=2)
# Sharded stock (Activity.shards > 1): user partitions holding the per-user claims (never
# change it while a sharded activity is live).
SECKILL_USER_PARTITIONS = env.int("SECKILL_USER_PARTITIONS", default=16)
# Seconds after which a sharded purchase's pending claim (claimed, shard step not settled)
# counts as left behind by a Redis error: the shopper's next purchase and reconciliation
# settle it. Well above the Redis socket timeout, so a purchase in flight is never touched.
SECKILL_CLAIM_PENDING_TIMEOUT = env.float("SECKILL_CLAIM_PENDING_TIMEOUT", default=10.0)

# --- Mail (password reset) -------------------------------------------------------------
# EMAIL_URL in django-environ's form: smtp+tls://user:password@host:587, smtps://…,
# consolemail:// (the mail printed to the log), filemail:///path. Production requires it.
EMAIL_URL = env("EMAIL_URL", default="consolemail://")


def email_settings(url: str) -> dict:
    """Django's EMAIL_* settings for a mail URL."""
    parsed = env.email_url_config(url)
    return {
        "EMAIL_BACKEND": parsed["EMAIL_BACKEND"],
        "EMAIL_HOST": parsed["EMAIL_HOST"] or "localhost",
        "EMAIL_PORT": parsed["EMAIL_PORT"] or 25,
        "EMAIL_HOST_USER": parsed["EMAIL_HOST_USER"] or "",
        "EMAIL_HOST_PASSWORD": parsed["EMAIL_HOST_PASSWORD"] or "",
        "EMAIL_USE_TLS": bool(parsed.get("EMAIL_USE_TLS")),
        "EMAIL_USE_SSL": bool(parsed.get("EMAIL_USE_SSL")),
        "EMAIL_FILE_PATH": "/" + parsed["EMAIL_FILE_PATH"] if parsed["EMAIL_FILE_PATH"] else None,
        "EMAIL_TIMEOUT": env.int("EMAIL_TIMEOUT", default=10),
    }


globals().update(email_settings(EMAIL_URL))
DEFAULT_FROM_EMAIL = env("DJANGO_DEFAULT_FROM_EMAIL", default="webmaster@localhost")

# --- Operator endpoints ------------------------------------------------------------------
# Bearer token for /metrics and the details of /healthz (server/health.py). Unset: /metrics
# answers 401 to everyone and /healthz only says ok or degraded.
METRICS_TOKEN = env("METRICS_TOKEN", default="")

# Logs: every line carries the request id; DJANGO_LOG_FORMAT=json for one JSON object per line.
LOG_FORMAT = env("DJANGO_LOG_FORMAT", default="plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "server.request_log.RequestIdFilter"},
        "expected_rejections": {"()": "core.log_filters.ExpectedRejectionFilter"},
        "url_passwords": {"()": "core.safety.UrlPasswordFilter"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
        "json": {"()": "server.request_log.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["request_id", "url_passwords"],
        }
    },
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Django logs every 4xx at WARNING; 409/410/429 are a flash sale's expected answer
        # to almost every request and are not logged one by one (core/log_filters.py).
        "django.request": {"filters": ["expected_rejections"]},
    },
}

CELERY_BEAT_SCHEDULE = {
    "seckill-replay": {"task": "seckill.tasks.reservations_replay_task", "schedule": SECKILL_REPLAY_INTERVAL},
    "seckill-start": {"task": "seckill.tasks.activities_start_task", "schedule": 2.0},
    "seckill-autowarm": {"task": "seckill.tasks.activities_autowarm_task", "schedule": SECKILL_AUTOWARM_INTERVAL},
    "seckill-close": {"task": "seckill.tasks.activities_close_task", "schedule": 30.0},
    "seckill-reconcile": {"task": "seckill.tasks.reconcile_live_task", "schedule": SECKILL_RECONCILE_INTERVAL},
    "seckill-room-ticks": {
        "task": "seckill.tasks.room_ticks_task",
        "schedule": SECKILL_ROOM_TICK_INTERVAL,
        "options": {"expires": 5 * SECKILL_ROOM_TICK_INTERVAL},  # ticks a stopped worker missed are dropped
    },
    "orders-expire-sweep": {
        "task": "orders.tasks.orders_expire_overdue_task",
        "schedule": SECKILL_EXPIRY_SWEEP_INTERVAL,
    },
}

# Mount bench/'s contrast endpoints (the database-direct purchase) under /bench/.
# Only `make bench` turns this on.
SECKILL_BENCH_VIEWS = env.bool("SECKILL_BENCH_VIEWS", default=False)
