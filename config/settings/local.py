"""Local development: `make run` and `python manage.py …` on a workstation.

With no DATABASE_URL / REDIS_URL in the environment, the embedded servers are
started (or reused) so that every management command just works.
"""

import os

from config import embedded

os.environ.update(embedded.ensure_services())

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env("DJANGO_SECRET_KEY", default="local-development-only-not-secret")
PAYMENT_GATEWAY_SECRET = env("PAYMENT_GATEWAY_SECRET", default="local-gateway-secret-not-secret")
