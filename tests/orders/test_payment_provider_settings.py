"""Production refuses the simulated provider unless asked for it explicitly."""

import secrets
import subprocess
import sys

from django.conf import settings

from ..helpers import BASE_DIR, subprocess_env


def production_check(**extra: str) -> subprocess.CompletedProcess:
    env = subprocess_env(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="shop.example.com",
        DATABASE_URL="postgres://shop@127.0.0.1:5432/shop",  # never connected to by `check`
        REDIS_URL=settings.REDIS_URL,
        EMAIL_URL="consolemail://",
    )
    for name in ("PAYMENT_PROVIDER", "PAYMENT_SIMULATED_ALLOWED"):
        env.pop(name, None)
    env.update(extra)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_refuses_the_simulated_provider_without_the_flag():
    refused = production_check(PAYMENT_PROVIDER="simulated")
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr and "PAYMENT_SIMULATED_ALLOWED=true" in refused.stderr
    refused = production_check(PAYMENT_PROVIDER="simulated", PAYMENT_SIMULATED_ALLOWED="false")
    assert refused.returncode != 0


def test_production_starts_with_the_flag_or_without_a_provider():
    allowed = production_check(PAYMENT_PROVIDER="simulated", PAYMENT_SIMULATED_ALLOWED="true")
    assert allowed.returncode == 0, allowed.stderr
    no_provider = production_check()  # payments then answer 503 payments_unavailable
    assert no_provider.returncode == 0, no_provider.stderr
