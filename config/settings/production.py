"""Production: everything comes from the environment; nothing embedded starts."""

from .base import *  # noqa: F403
from .base import DATABASE_URL, REDIS_URL, env

SECRET_KEY = env("DJANGO_SECRET_KEY")  # no default: a missing key fails at start-up
DEBUG = False
if not DATABASE_URL or not REDIS_URL:
    raise RuntimeError("config.settings.production needs DATABASE_URL and REDIS_URL in the environment.")

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SESSION_COOKIE_SECURE = SECURE_SSL_REDIRECT
CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 30 if SECURE_SSL_REDIRECT else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
