"""Production: everything comes from the environment; nothing embedded starts.

`python manage.py check --deploy` passes with no warning (tests/gates/test_deployment.py)
as long as TLS is on (the default). DJANGO_SECURE_SSL_REDIRECT=false leaves the redirect to a
TLS-terminating proxy; the cookies stay Secure and HSTS stays on unless their own variables
(DJANGO_SECURE_COOKIES, DJANGO_SECURE_HSTS_SECONDS) turn them off, e.g. for plain HTTP on loopback.
"""

import ipaddress
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import (
    DATABASE_URL,
    EMAIL_CONFIGURED,
    PAYMENT_HOST,
    PAYMENT_PROVIDERS,
    PAYMENT_SIMULATED_ALLOWED,
    REDIS_URL,
    email_settings,
    env,
    payment_variants,
)

# Secrets and hosts only from the environment: a missing one fails at start-up.
SECRET_KEY = env("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
DEBUG = False
if not DATABASE_URL or not REDIS_URL:
    raise RuntimeError("config.settings.production needs DATABASE_URL and REDIS_URL in the environment.")
# Mail (EMAIL_URL, or EMAIL_HOST and friends: base.py). None named: SMTP to localhost:25, never
# a silent console; `check --deploy` warns (accounts.W001) and each mail that cannot go is
# retried by Celery, then logged as an error. The shop itself starts and sells.
if not EMAIL_CONFIGURED:
    globals().update(email_settings("smtp://localhost:25"))


def _public_host(host: str) -> bool:
    """A host[:port] others can reach: not empty, not localhost, not a loopback or unspecified address."""
    try:
        name = urlsplit(f"//{host}").hostname or ""
    except ValueError:
        return False
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name not in ("", "localhost") and not name.endswith(".localhost")
    return not (address.is_loopback or address.is_unspecified)


# No provider unless one is chosen (pay answers 503 payments_unavailable). The simulated
# provider lets anyone holding a pay link mark an order paid: never by accident.
PAYMENT_PROVIDER = env("PAYMENT_PROVIDER", default="")
PAYMENT_USES_SSL = env.bool("PAYMENT_USES_SSL", default=True)
if PAYMENT_PROVIDER and PAYMENT_PROVIDER not in PAYMENT_PROVIDERS:
    raise ImproperlyConfigured(
        f"PAYMENT_PROVIDER={PAYMENT_PROVIDER!r} is not a provider this shop has: set one of "
        f"{', '.join(PAYMENT_PROVIDERS)}, or leave it unset (payments refused)."
    )
if PAYMENT_PROVIDER == "simulated" and not PAYMENT_SIMULATED_ALLOWED:
    raise ImproperlyConfigured(
        "PAYMENT_PROVIDER=simulated is a stand-in that takes no money: set PAYMENT_PROVIDER to a real "
        "provider (e.g. stripe), or PAYMENT_SIMULATED_ALLOWED=true for a load test or a demo."
    )
PAYMENT_VARIANTS = payment_variants(PAYMENT_PROVIDER)
if PAYMENT_PROVIDER == "stripe":
    # Without the endpoint secret anyone could sign a webhook (an HMAC under the empty key);
    # without a public host Stripe sends shoppers back to a machine that is not the shop.
    _stripe_config = PAYMENT_VARIANTS["stripe"][1]
    _missing = [
        name
        for name, value in (
            ("STRIPE_API_KEY", _stripe_config["api_key"]),
            ("STRIPE_ENDPOINT_SECRET", _stripe_config["endpoint_secret"]),
        )
        if not value
    ]
    if not _public_host(PAYMENT_HOST):
        _missing.append(f"PAYMENT_HOST (the shop's public host name, not {PAYMENT_HOST!r})")
    if _missing:
        raise ImproperlyConfigured(
            "PAYMENT_PROVIDER=stripe needs " + ", ".join(_missing) + " in the environment: the secret key, the "
            "signing secret of the webhook endpoint at https://<PAYMENT_HOST>/payments/process/stripe/, and the "
            "host Stripe sends shoppers back to."
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
