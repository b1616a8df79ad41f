"""Local development: `make run`, `make manage ARGS="…"` on a workstation.

Settings only read the environment. `make run` and `make manage` start the embedded
PostgreSQL and Redis when DATABASE_URL / REDIS_URL are unset, and pass their URLs on.
"""

from typing import cast

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import DATABASE_URL, LOGGING, REDIS_URL, env

if not DATABASE_URL or not REDIS_URL:
    raise ImproperlyConfigured(
        'DATABASE_URL and REDIS_URL are unset: use `make run` or `make manage ARGS="…"`, which start the '
        "embedded servers, or set both (see .env.example)."
    )

DEBUG = env.bool("DJANGO_DEBUG", default=True)
# The public development secrets below are allowed here (core.safety refuses them elsewhere).
DEVELOPMENT_SECRETS_ALLOWED = True
SECRET_KEY = env("DJANGO_SECRET_KEY", default="local-development-only-not-secret")
PAYMENT_GATEWAY_SECRET = env("PAYMENT_GATEWAY_SECRET", default="local-gateway-secret-not-secret")
PAYMENT_USES_SSL = env.bool("PAYMENT_USES_SSL", default=False)
# The demo shop sells in yuan: its times are Beijing time unless DJANGO_TIME_ZONE says otherwise.
TIME_ZONE = env("DJANGO_TIME_ZONE", default="Asia/Shanghai")
CELERY_TIMEZONE = TIME_ZONE
# make run's output is what happens: django-axes's four INFO lines per login (clean-ups of
# nothing, resets of nothing) are not; its warnings (lock-outs) are.
LOGGING = {**LOGGING, "loggers": {**cast(dict, LOGGING["loggers"]), "axes": {"level": "WARNING"}}}
