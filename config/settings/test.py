"""Settings for the test suite. They only read the environment: the servers are started
before (devtools.pytest_plugin puts the embedded ones' URLs in the environment)."""

import os

from .base import *  # noqa: F403
from .base import BASE_DIR, DATABASES, env
from .registry import settings_read

SECRET_KEY = env("DJANGO_SECRET_KEY", default="test-only-not-secret")
DEBUG = False
DEVELOPMENT_SECRETS_ALLOWED = True
# Login throttling is on only in the tests about it (their client.login() has no request).
AXES_ENABLED = False
# The account and order throttles too (tests/gates/test_throttles.py turns them on).
RATELIMIT_ENABLE = env.bool("DJANGO_THROTTLES_ENABLED", default=False)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
WHITENOISE_USE_FINDERS = True  # no collectstatic needed to serve static files in tests
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
if env.bool("SECKILL_TEST_MANIFEST_STATIC", default=False):
    # Processes that serve the fingerprinted assets (browser and cache tests), after collectstatic.
    STORAGES["staticfiles"] = {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}
    STATIC_ROOT = BASE_DIR / ".local" / "test-staticfiles"
    WHITENOISE_USE_FINDERS = False  # served as in production: from STATIC_ROOT only
PAYMENT_GATEWAY_SECRET = env("PAYMENT_GATEWAY_SECRET", default="test-gateway-secret")
PAYMENT_USES_SSL = env.bool("PAYMENT_USES_SSL", default=False)
DATABASES["default"]["CONN_MAX_AGE"] = 0
# Tests want quick replays; each test that needs one sets its own grace.
SECKILL_REPLAY_GRACE = 2
# Other defaults for the suite (config/settings/registry.py reads and checks them as base.py
# does): the environment still wins, so a process a test starts gets what the test asks.
_SUITE_DEFAULTS: dict[str, object] = {
    # Gates that remember or limit are off unless a test (or the process it starts) asks.
    "SECKILL_ACTIVITY_CACHE_TTL": 0.0,
    "SECKILL_LIST_CACHE_TTL": 0.0,
    "SECKILL_SOLD_OUT_TTL": 0.0,
    "SECKILL_DUPLICATE_TTL": 0.0,
    "SECKILL_RATE_PER_USER": "off",
    "SECKILL_RATE_PER_IP": "off",
    "SECKILL_ACTIVITY_REDIS_TTL": 0.0,
    "SECKILL_BLACKLIST_CACHE_TTL": 0.0,
    "SECKILL_BLACKLIST_REDIS_TTL": 0.0,
    "SECKILL_SHOPPER_CACHE_TTL": 0,
    # The suite's Redis servers keep nothing on disk; the tests about it turn this off.
    "SECKILL_ALLOW_VOLATILE_REDIS": True,
    # The processes the tests start inherit it: the tests scrape /metrics with it.
    "METRICS_TOKEN": "test-metrics-token",
}
globals().update(settings_read(env, project_dir=BASE_DIR, defaults=_SUITE_DEFAULTS, names=_SUITE_DEFAULTS))

# --- isolation ------------------------------------------------------------------
# The suite owns two Redis databases (stock/cache and broker) and flushes them per
# test; processes the tests start (gunicorn, Celery workers) inherit the same numbers
# and are pointed at the test database through SECKILL_TEST_DATABASE_NAME.
SECKILL_TEST_REDIS_DB = env.int("SECKILL_TEST_REDIS_DB", default=9)


def _redis_db(url: str, db: int) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


REDIS_URL = _redis_db(REDIS_URL, SECKILL_TEST_REDIS_DB)
# A Redis Cluster (tests/cluster) has database 0 only and is named as given.
SECKILL_REDIS_URL = env("SECKILL_REDIS_URL", default="") if SECKILL_REDIS_CLUSTER else REDIS_URL
CACHES["default"]["LOCATION"] = REDIS_URL
_broker = env("CELERY_BROKER_URL", default="")
# A RabbitMQ broker is used as given; a Redis broker gets its own test database.
CELERY_BROKER_URL = (
    _broker if _broker.startswith("amqp") else _redis_db(_broker or REDIS_URL, SECKILL_TEST_REDIS_DB + 1)
)
if CELERY_BROKER_URL.startswith("amqp"):
    # A RabbitMQ is shared (by engineers, by CI): this run gets a queue of its own,
    # which the processes it starts inherit through the environment.
    import uuid

    os.environ.setdefault("CELERY_TASK_DEFAULT_QUEUE", f"seckill-test-{uuid.uuid4().hex[:12]}")
    CELERY_TASK_DEFAULT_QUEUE = os.environ["CELERY_TASK_DEFAULT_QUEUE"]
_test_db_name = env("SECKILL_TEST_DATABASE_NAME", default="")
if _test_db_name:
    DATABASES["default"]["NAME"] = _test_db_name
