"""What keeps a deployment from showing or using what it must not: the start-up check that
refuses a debug site on a public host and the public development secrets outside the
development settings, the debug page's filter that hides connection URLs, and the logging
filter that masks a URL's password.

The check is a Django system check (registered by the sale's app config), and the entry
points that do not run Django's checks (the web server's application, the Celery
worker and beat) call :func:`refuse_unsafe_settings` as they start.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.views.debug import SafeExceptionReporterFilter

# The public defaults of config/settings/local.py and test.py (DJANGO_SECRET_KEY and
# PAYMENT_GATEWAY_SECRET): anyone can read them, so only those settings may use them.
DEVELOPMENT_SECRETS = frozenset(
    {
        "local-development-only-not-secret",
        "test-only-not-secret",
        "local-gateway-secret-not-secret",
        "test-gateway-secret",
    }
)
# Hosts a debug site may answer: this machine only (Django's test client adds "testserver").
LOCAL_HOSTS = frozenset({"localhost", ".localhost", "127.0.0.1", "[::1]", "::1", "testserver"})

# "scheme://user:password@host": the password, whatever the scheme (postgres, redis, amqp, smtp).
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@'\"]*:)[^@\s/'\"]+(?P<at>@)", re.IGNORECASE)
# "https://key@sentry…": a DSN's credential is its user part.
_URL_USER_SECRET = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://)[^/\s:@'\"]+(?P<at>@)", re.IGNORECASE)
MASK = "********"


def url_passwords_masked(text: str) -> str:
    """``text`` with the password (or credential) of every URL in it masked."""
    if "@" not in text:
        return text
    text = _URL_PASSWORD.sub(rf"\g<head>{MASK}\g<at>", text)
    return _URL_USER_SECRET.sub(rf"\g<head>{MASK}\g<at>", text)


# --- the start-up check ------------------------------------------------------------------


def deploy_safety_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """DEBUG on with a host beyond this machine allowed, or a public development secret
    outside the development settings: either would serve the world what only a
    developer should see or sign with a key everyone knows."""
    errors: list[checks.CheckMessage] = []
    public = [host for host in settings.ALLOWED_HOSTS if host not in LOCAL_HOSTS]
    if settings.DEBUG and public:
        errors.append(
            checks.Error(
                f"DEBUG is on while ALLOWED_HOSTS allows {', '.join(public)}: a debug site shows its code, "
                "settings and request data to whoever reaches it.",
                hint="Use config.settings.production (the default of every entry point), or DJANGO_DEBUG=false, "
                "or allow only localhost, 127.0.0.1 and [::1].",
                id="core.E001",
            )
        )
    if not getattr(settings, "DEVELOPMENT_SECRETS_ALLOWED", False):
        for setting, variable in (
            ("SECRET_KEY", "DJANGO_SECRET_KEY"),
            ("PAYMENT_GATEWAY_SECRET", "PAYMENT_GATEWAY_SECRET"),
        ):
            if getattr(settings, setting, "") in DEVELOPMENT_SECRETS:
                errors.append(
                    checks.Error(
                        f"{variable} is a development default that is public in this project's source.",
                        hint=f"Set {variable} to a fresh random value, e.g. "
                        "python -c 'import secrets; print(secrets.token_urlsafe(50))'.",
                        id="core.E002",
                    )
                )
    return errors


def refuse_unsafe_settings() -> None:
    """For the entry points Django's checks do not run in: stop with the check's message."""
    errors = deploy_safety_check()
    if errors:
        raise ImproperlyConfigured("; ".join(f"{e.id}: {e.msg} {e.hint}" for e in errors))


# --- what the debug page shows -------------------------------------------------------------


class ConnectionSafeExceptionReporterFilter(SafeExceptionReporterFilter):
    """Django's filter hides settings named like API, KEY, PASS, SECRET, TOKEN…; connection
    URLs (DATABASE_URL, REDIS_URL, CELERY_BROKER_URL, a cache's LOCATION, a DSN) carry
    their password inside the value, so their names are hidden too, as are a traceback's
    local variables named so, and any other value shown has its URL's password masked."""

    hidden_settings = re.compile(
        "API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|DSN|BROKER|LOCATION|EMAIL_HOST_USER", flags=re.IGNORECASE
    )

    def cleanse_setting(self, key, value):
        cleansed = super().cleanse_setting(key, value)
        return url_passwords_masked(cleansed) if isinstance(cleansed, str) else cleansed

    def get_traceback_frame_variables(self, request, tb_frame):
        return [
            (name, self._frame_value_cleansed(name, value))
            for name, value in super().get_traceback_frame_variables(request, tb_frame)
        ]

    def _frame_value_cleansed(self, name, value):
        if isinstance(name, str) and self.hidden_settings.search(name):
            return self.cleansed_substitute  # a local named like a secret: ``password``, ``broker_url``
        return url_passwords_masked(value) if isinstance(value, str) else _masked_repr(value)


def _masked_repr(value):
    """A frame variable that is not text is shown by its repr: masked when it holds a URL."""
    try:
        shown = repr(value)
    except Exception:
        return value
    masked = url_passwords_masked(shown)
    return masked if masked != shown else value


# --- what the logs show ----------------------------------------------------------------------


class UrlPasswordFilter(logging.Filter):
    """Mask a URL's password in a log line and in its traceback, whatever logged it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = url_passwords_masked(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[0] is not None:
            trace = logging.Formatter().formatException(record.exc_info)
            masked_trace = url_passwords_masked(trace)
            if masked_trace != trace:
                # Both formatters print exc_info themselves: the masked text replaces it.
                record.msg, record.args = f"{record.getMessage()}\n{masked_trace}", None
                record.exc_info, record.exc_text = None, None
        return True
