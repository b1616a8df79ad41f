"""Production: everything comes from the environment; nothing embedded starts.

`python manage.py check --deploy` passes with no warning (tests/gates/test_deployment.py)
as long as TLS is on (the default). DJANGO_SECURE_SSL_REDIRECT=false leaves the redirect to a
TLS-terminating proxy; the cookies stay Secure and HSTS stays on unless their own variables
(DJANGO_SECURE_COOKIES, DJANGO_SECURE_HSTS_SECONDS) turn them off, e.g. for plain HTTP on loopback.
"""

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import DATABASE_URL, PAYMENT_SIMULATED_ALLOWED, REDIS_URL, email_settings, env

# Secrets and hosts only from the environment: a missing one fails at start-up.
SECRET_KEY = env("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
DEBUG = False
if not DATABASE_URL or not REDIS_URL:
    raise RuntimeError("config.settings.production needs DATABASE_URL and REDIS_URL in the environment.")
# Password reset sends mail: a deployment names its mail server (no silent console).
EMAIL_URL = env("EMAIL_URL", default="")
if not EMAIL_URL:
    raise ImproperlyConfigured(
        "config.settings.production needs EMAIL_URL in the environment, e.g. "
        "smtp+tls://user:password@mail.example.com:587 (consolemail:// prints the mails to the log instead)."
    )
globals().update(email_settings(EMAIL_URL))
# No provider unless one is chosen (pay answers 503 payments_unavailable). The simulated
# provider lets anyone holding a pay link mark an order paid: never by accident.
PAYMENT_PROVIDER = env("PAYMENT_PROVIDER", default="")
PAYMENT_USES_SSL = env.bool("PAYMENT_USES_SSL", default=True)
if PAYMENT_PROVIDER == "simulated" and not PAYMENT_SIMULATED_ALLOWED:
    raise ImproperlyConfigured(
        "PAYMENT_PROVIDER=simulated is a stand-in that takes no money: set PAYMENT_PROVIDER to a real "
        "provider (e.g. stripe), or PAYMENT_SIMULATED_ALLOWED=true for a load test or a demo."
    )

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
# Not tied to the redirect: behind a TLS-terminating proxy the shopper still speaks HTTPS.
SECURE_COOKIES = env.bool("DJANGO_SECURE_COOKIES", default=True)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
LANGUAGE_COOKIE_SECURE = SECURE_COOKIES
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=SECURE_HSTS_SECONDS > 0)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=SECURE_HSTS_SECONDS > 0)
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# Not HttpOnly: the cached activity page's script reads and writes it (static/seckill/shop.js,
# Secure over HTTPS); it holds a language code, nothing secret.
LANGUAGE_COOKIE_HTTPONLY = False
LANGUAGE_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
