"""Settings shared by every environment; everything configurable comes from the environment."""

from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONE, SELF
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.retry import Retry

from . import registry

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
    "accounts",
    "inventory",
    "seckill",
    "orders",
    "rehearsal",  # make rehearse: its management commands (no tables)
]

MIDDLEWARE = [
    # Outermost: a page declared identical for every visitor leaves without per-visitor headers.
    "seckill.middleware.SharedPageMiddleware",
    "server.request_log.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # Django's LocaleMiddleware; an unprefixed page in the visitor's language (i18n_patterns).
    "core.locale.PathOrVisitorLocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "seckill.metrics.PurchaseOutcomeMiddleware",
    # A view's or a template's database error while the database is away becomes a 503.
    "seckill.middleware.DatabaseAwayMiddleware",
    # The login and password-reset throttles (docs/GATES.md); their 429 page.
    "accounts.throttles.AccountThrottleMiddleware",
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

# --- The shop's own settings ---------------------------------------------------------
# Every SECKILL_* setting and a few more, each declared once (type, default, meaning, bound)
# in config/settings/registry.py, read from the environment and checked there: a value out
# of its bound stops the start-up. docs/reference/settings.md is generated from that table.
# The names are bound one by one so that django-stubs (strict settings) knows their types;
# tests/test_settings_reference.py checks these lines against the table.
_own = registry.settings_read(env, project_dir=BASE_DIR, refs={"REDIS_URL": REDIS_URL})
SECKILL_MEMORY_BOUND = registry.MEMORY_BOUND  # fixed: the API's promise (docs/API.md), not a knob
SECKILL_RATE_PER_USER: str = _own["SECKILL_RATE_PER_USER"]
SECKILL_RATE_PER_IP: str = _own["SECKILL_RATE_PER_IP"]
SECKILL_ADMISSION_RATE: int = _own["SECKILL_ADMISSION_RATE"]
SECKILL_ADMISSION_BURST: int = _own["SECKILL_ADMISSION_BURST"]
SECKILL_DEVICE_HEADER: str = _own["SECKILL_DEVICE_HEADER"]
SECKILL_CAPTCHA_TTL: int = _own["SECKILL_CAPTCHA_TTL"]
SECKILL_SOLD_OUT_TTL: float = _own["SECKILL_SOLD_OUT_TTL"]
SECKILL_DUPLICATE_TTL: float = _own["SECKILL_DUPLICATE_TTL"]
SECKILL_ACTIVITY_CACHE_TTL: float = _own["SECKILL_ACTIVITY_CACHE_TTL"]
SECKILL_LIST_CACHE_TTL: float = _own["SECKILL_LIST_CACHE_TTL"]
SECKILL_BLACKLIST_CACHE_TTL: float = _own["SECKILL_BLACKLIST_CACHE_TTL"]
SECKILL_ROOM_STATUS_TTL: float = _own["SECKILL_ROOM_STATUS_TTL"]
SECKILL_ACTIVITY_REDIS_TTL: float = _own["SECKILL_ACTIVITY_REDIS_TTL"]
SECKILL_ACTIVITY_ABSENT_TTL: float = _own["SECKILL_ACTIVITY_ABSENT_TTL"]
SECKILL_CACHE_REBUILD_WAIT: float = _own["SECKILL_CACHE_REBUILD_WAIT"]
SECKILL_BLACKLIST_REDIS_TTL: float = _own["SECKILL_BLACKLIST_REDIS_TTL"]
SECKILL_SHOPPER_CACHE_TTL: int = _own["SECKILL_SHOPPER_CACHE_TTL"]
SECKILL_TOKEN_CACHE_TTL: float = _own["SECKILL_TOKEN_CACHE_TTL"]
SECKILL_TOKEN_SHARED_TTL: int = _own["SECKILL_TOKEN_SHARED_TTL"]
SECKILL_TOKEN_AUTO_FILL: bool = _own["SECKILL_TOKEN_AUTO_FILL"]
SECKILL_TOKEN_FILTER_ERROR_RATE: float = _own["SECKILL_TOKEN_FILTER_ERROR_RATE"]
SECKILL_TOKEN_REFUSED_TTL: float = _own["SECKILL_TOKEN_REFUSED_TTL"]
SECKILL_AUTH_FAILURES_PER_IP: str = _own["SECKILL_AUTH_FAILURES_PER_IP"]
SECKILL_ROOM_JOINS_PER_IP: str = _own["SECKILL_ROOM_JOINS_PER_IP"]
SECKILL_ROOM_TICK_INTERVAL: float = _own["SECKILL_ROOM_TICK_INTERVAL"]
SECKILL_AUTO_WARMUP_LEAD: int = _own["SECKILL_AUTO_WARMUP_LEAD"]
SECKILL_AUTOWARM_INTERVAL: float = _own["SECKILL_AUTOWARM_INTERVAL"]
SECKILL_RECONCILE_INTERVAL: float = _own["SECKILL_RECONCILE_INTERVAL"]
SECKILL_DB_RESERVE_PERCENT: int = _own["SECKILL_DB_RESERVE_PERCENT"]
SECKILL_REPLAY_GRACE: int = _own["SECKILL_REPLAY_GRACE"]
SECKILL_REPLAY_MAX_ATTEMPTS: int = _own["SECKILL_REPLAY_MAX_ATTEMPTS"]
SECKILL_REPLAY_INTERVAL: float = _own["SECKILL_REPLAY_INTERVAL"]
SECKILL_ORDER_BATCH_SIZE: int = _own["SECKILL_ORDER_BATCH_SIZE"]
SECKILL_DRAIN_KICK_TTL_MS: int = _own["SECKILL_DRAIN_KICK_TTL_MS"]
SECKILL_DRAIN_TASK_SECONDS: float = _own["SECKILL_DRAIN_TASK_SECONDS"]
SECKILL_DRAIN_PASS_PAUSE: float = _own["SECKILL_DRAIN_PASS_PAUSE"]
SECKILL_DRAIN_FLOOD_DEFER: float = _own["SECKILL_DRAIN_FLOOD_DEFER"]
SECKILL_DEFAULT_PAY_TIMEOUT: int = _own["SECKILL_DEFAULT_PAY_TIMEOUT"]
SECKILL_EXPIRY_SWEEP_INTERVAL: float = _own["SECKILL_EXPIRY_SWEEP_INTERVAL"]
SECKILL_PAY_RATE_PER_USER: str = _own["SECKILL_PAY_RATE_PER_USER"]
SECKILL_CANCEL_RATE_PER_USER: str = _own["SECKILL_CANCEL_RATE_PER_USER"]
PAYMENT_CURRENCY: str = _own["PAYMENT_CURRENCY"]
PAYMENT_NOTIFICATION_WINDOW: int = _own["PAYMENT_NOTIFICATION_WINDOW"]
PAYMENT_RETRY_AFTER: int = _own["PAYMENT_RETRY_AFTER"]
SECKILL_REDIS_URL: str = _own["SECKILL_REDIS_URL"]
SECKILL_REDIS_CLUSTER: bool = _own["SECKILL_REDIS_CLUSTER"]
SECKILL_CLAIM_PENDING_TIMEOUT: float = _own["SECKILL_CLAIM_PENDING_TIMEOUT"]
SECKILL_BREAKER_FAILURES: int = _own["SECKILL_BREAKER_FAILURES"]
SECKILL_BREAKER_RESET: float = _own["SECKILL_BREAKER_RESET"]
SECKILL_FALLBACK_CONCURRENCY: int = _own["SECKILL_FALLBACK_CONCURRENCY"]
SECKILL_TRUSTED_PROXY_HEADER: str = _own["SECKILL_TRUSTED_PROXY_HEADER"]
SECKILL_TRUSTED_PROXY_COUNT: int = _own["SECKILL_TRUSTED_PROXY_COUNT"]
SECKILL_PAGE_MAX_AGE: int = _own["SECKILL_PAGE_MAX_AGE"]
SECKILL_PAGE_S_MAXAGE: int = _own["SECKILL_PAGE_S_MAXAGE"]
SECKILL_PUBLISH_DIR: Path = _own["SECKILL_PUBLISH_DIR"]
WEB_STATEMENT_TIMEOUT: float = _own["WEB_STATEMENT_TIMEOUT"]
METRICS_TOKEN: str = _own["METRICS_TOKEN"]
SECKILL_ALLOW_VOLATILE_REDIS: bool = _own["SECKILL_ALLOW_VOLATILE_REDIS"]
SECKILL_BENCH_VIEWS: bool = _own["SECKILL_BENCH_VIEWS"]

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
AXES_CLIENT_IP_CALLABLE = "seckill.purchase.limits.client_ip"  # the same trusted-proxy rule as the rate limits
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
    "order-pay": SECKILL_PAY_RATE_PER_USER,
    "order-cancel": SECKILL_CANCEL_RATE_PER_USER,
}
# URL names: reversed in the page's language (/zh-hans/accounts/login/ from a Chinese page).
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

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
        "seckill.purchase.authentication.CachedTokenAuthentication",
        "seckill.purchase.authentication.CachedSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.SafeJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 20,
    "EXCEPTION_HANDLER": "core.api_errors.exception_handler",
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

# --- Payments (django-payments) --------------------------------------------------------
# The provider `POST /api/orders/<no>/pay` starts payments with, and the only one
# registered in PAYMENT_VARIANTS: "simulated", "stripe", or empty (no provider: pay answers
# 503 payments_unavailable, every /payments/process/<variant>/ 404). Production refuses
# "simulated" unless PAYMENT_SIMULATED_ALLOWED=true, and "stripe" without its keys and a
# public PAYMENT_HOST (config/settings/production.py).
PAYMENT_PROVIDER = env("PAYMENT_PROVIDER", default="simulated")
PAYMENT_SIMULATED_ALLOWED = env.bool("PAYMENT_SIMULATED_ALLOWED", default=False)
PAYMENT_MODEL = "orders.Payment"
# The shop's public host: providers send the shopper back (and webhooks) to it.
PAYMENT_HOST = env("PAYMENT_HOST", default="localhost:8000")
PAYMENT_USES_SSL = env.bool("PAYMENT_USES_SSL", default=not DEBUG)
# Secret the simulated provider signs its notifications with (HMAC-SHA256).
# Empty: the simulated provider answers 503 rather than accept unsigned notifications.
PAYMENT_GATEWAY_SECRET = env("PAYMENT_GATEWAY_SECRET", default="")
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

# --- Mail (password reset, the order mails: accounts.mail, orders.mails) ---------------
# EMAIL_URL in django-environ's form: smtp+tls://user:password@host:587, smtps://…,
# consolemail:// (the mail printed to the log), filemail:///path; or, without it, SMTP to
# EMAIL_HOST (EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS). Neither:
# the console here; production sends to localhost:25 and its deploy check warns (accounts.W001).
EMAIL_URL = env("EMAIL_URL", default="")
EMAIL_HOST = env("EMAIL_HOST", default="")
EMAIL_CONFIGURED = bool(EMAIL_URL or EMAIL_HOST)


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


def email_host_settings(host: str) -> dict:
    """Django's EMAIL_* settings for SMTP to ``host``, the rest from EMAIL_PORT and friends."""
    return {
        **email_settings("smtp://"),
        "EMAIL_HOST": host,
        "EMAIL_PORT": env.int("EMAIL_PORT", default=25),
        "EMAIL_HOST_USER": env("EMAIL_HOST_USER", default=""),
        "EMAIL_HOST_PASSWORD": env("EMAIL_HOST_PASSWORD", default=""),
        "EMAIL_USE_TLS": env.bool("EMAIL_USE_TLS", default=False),
    }


globals().update(
    email_settings(EMAIL_URL)
    if EMAIL_URL
    else email_host_settings(EMAIL_HOST)
    if EMAIL_HOST
    else email_settings("consolemail://")
)
DEFAULT_FROM_EMAIL = env("DJANGO_DEFAULT_FROM_EMAIL", default="webmaster@localhost")
# The reminder mail goes when this share of an order's pay window is left (0: no reminder).
ORDER_MAIL_REMINDER_SHARE = env.float("ORDER_MAIL_REMINDER_SHARE", default=0.25)

# Logs: every line carries the request id; DJANGO_LOG_FORMAT=json for one JSON object per line.
LOG_FORMAT = env("DJANGO_LOG_FORMAT", default="plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "server.request_log.RequestIdFilter"},
        "expected_rejections": {"()": "core.log_filters.ExpectedRejectionFilter"},
        "client_errors": {"()": "server.request_log.ClientErrorFilter"},
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
            # A 4xx's "Not Found: /x" is left out of the plain console: its access line says
            # it (one line a request). The JSON lines keep it: the access line carries no
            # request id, and a client's X-Request-ID must lead to a line.
            "filters": ["request_id", "url_passwords", *(["client_errors"] if LOG_FORMAT != "json" else [])],
        }
    },
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Django logs every 4xx at WARNING; 409/410/429 are a flash sale's expected answer
        # to almost every request and are not logged one by one (core/log_filters.py).
        "django.request": {"filters": ["expected_rejections"]},
        # Django's own console handler (DEBUG only) printed each of its lines a second time.
        "django": {"handlers": []},
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
    "orders-mail-reminders": {"task": "orders.mails.order_reminders_task", "schedule": 30.0},
}
