"""Production refuses the simulated provider unless asked for it explicitly, and a real
provider (Stripe) without its keys and a public PAYMENT_HOST."""

import json
import secrets
import subprocess
import sys

import pytest
from django.conf import settings

from ..helpers import BASE_DIR, subprocess_env

STRIPE_KEYS = ("STRIPE_API_KEY", "STRIPE_ENDPOINT_SECRET")
STRIPE_READY = {
    "PAYMENT_PROVIDER": "stripe",
    "STRIPE_API_KEY": "sk_live_made_up",
    "STRIPE_ENDPOINT_SECRET": "whsec_made_up",
    "PAYMENT_HOST": "shop.example.com",
}


def production_env(**extra: str) -> dict[str, str]:
    env = subprocess_env(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="shop.example.com",
        DATABASE_URL="postgres://shop@127.0.0.1:5432/shop",  # never connected to by `check`
        REDIS_URL=settings.REDIS_URL,
        EMAIL_URL="consolemail://",
    )
    for name in ("PAYMENT_PROVIDER", "PAYMENT_SIMULATED_ALLOWED", "PAYMENT_HOST", *STRIPE_KEYS):
        env.pop(name, None)
    env.update(extra)
    return env


def production_check(**extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env=production_env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def production_settings(**extra: str) -> subprocess.CompletedProcess:
    """The production settings imported as a process starting would: stdout is the
    PAYMENT_VARIANTS they register, as JSON."""
    script = "import json; from django.conf import settings; print(json.dumps(settings.PAYMENT_VARIANTS))"
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=BASE_DIR,
        env=production_env(**extra),
        capture_output=True,
        text=True,
        timeout=60,
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


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"STRIPE_API_KEY": ""}, "STRIPE_API_KEY"),
        ({"STRIPE_ENDPOINT_SECRET": ""}, "STRIPE_ENDPOINT_SECRET"),
        ({"PAYMENT_HOST": ""}, "PAYMENT_HOST"),
        ({"PAYMENT_HOST": "localhost:8000"}, "PAYMENT_HOST"),
        ({"PAYMENT_HOST": "127.0.0.1:8000"}, "PAYMENT_HOST"),
        ({"PAYMENT_HOST": "[::1]:8000"}, "PAYMENT_HOST"),
    ],
)
def test_production_refuses_stripe_without_its_keys_or_a_public_host(change, named):
    refused = production_settings(**{**STRIPE_READY, **change})
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr and named in refused.stderr, refused.stderr


def test_production_refuses_stripe_without_anything_naming_every_missing_variable():
    refused = production_settings(PAYMENT_PROVIDER="stripe")
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr, refused.stderr
    for named in (*STRIPE_KEYS, "PAYMENT_HOST"):
        assert named in refused.stderr, refused.stderr


def test_production_refuses_a_provider_it_does_not_know():
    refused = production_settings(PAYMENT_PROVIDER="paypal")
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr and "paypal" in refused.stderr, refused.stderr


def test_production_registers_only_the_configured_provider():
    stripe = production_settings(**STRIPE_READY)
    assert stripe.returncode == 0, stripe.stderr
    variants = json.loads(stripe.stdout)
    assert list(variants) == ["stripe"]
    assert variants["stripe"][1]["api_key"] == "sk_live_made_up"
    assert variants["stripe"][1]["endpoint_secret"] == "whsec_made_up"
    nothing = production_settings()
    assert nothing.returncode == 0, nothing.stderr
    assert json.loads(nothing.stdout) == {}
    simulated = production_settings(PAYMENT_PROVIDER="simulated", PAYMENT_SIMULATED_ALLOWED="true")
    assert simulated.returncode == 0, simulated.stderr
    assert list(json.loads(simulated.stdout)) == ["simulated"]


def test_production_starts_with_stripe_configured():
    started = production_check(**STRIPE_READY)
    assert started.returncode == 0, started.stderr
