"""Settings for the test suite (tests/conftest.py starts the embedded servers first)."""

import os

from config import embedded

os.environ.update(embedded.ensure_services())

from .base import *  # noqa: F403
from .base import DATABASES, env

SECRET_KEY = env("DJANGO_SECRET_KEY", default="test-only-not-secret")
DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
DATABASES["default"]["CONN_MAX_AGE"] = 0
# Tests want quick replays; each test that needs one sets its own grace.
SECKILL_REPLAY_GRACE = 2
SECKILL_ACTIVITY_CACHE_TTL = 0.0
