"""The hardened deployment: `check --deploy` clean, a Content Security Policy, secure
cookies, throttled logins, a configurable admin path, secrets only from the environment."""

import secrets
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from ..helpers import BASE_DIR, subprocess_env


def production_env(**extra) -> dict:
    from django.conf import settings

    env = subprocess_env(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="shop.example.com",
        DATABASE_URL="postgres://shop@127.0.0.1:5432/shop",  # never connected to by these checks
        REDIS_URL=settings.REDIS_URL,
        EMAIL_URL="smtp+tls://shop:mail-password@mail.example.com:587",
    )
    env.pop("DJANGO_SECURE_SSL_REDIRECT", None)
    env.update(extra)
    return env


def manage(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_settings_pass_check_deploy_with_no_warning():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


@pytest.mark.parametrize("missing", ["DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "REDIS_URL"])
def test_production_refuses_to_start_without_its_secrets_and_urls(missing):
    env = production_env()
    env.pop(missing)
    result = manage("check", env=env)
    assert result.returncode != 0
    assert missing in result.stderr


def test_admin_path_comes_from_the_environment():
    script = "from django.urls import reverse; print(reverse('admin:index'))"
    result = manage("shell", "-c", script, env=production_env(DJANGO_ADMIN_URL="backoffice-7f3/"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("/backoffice-7f3/")


@pytest.mark.django_db
def test_pages_carry_a_content_security_policy(client):
    response = client.get("/accounts/login/")
    policy = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())
    assert directives["script-src"] == "'self'"  # no inline script, no other origin
    assert "frame-ancestors 'none'" in policy


@pytest.mark.django_db
def test_session_cookie_is_http_only_and_secure_under_production_flags(client):
    get_user_model().objects.create_user("staffer", password="right-horse-battery")
    with override_settings(SESSION_COOKIE_SECURE=True, CSRF_COOKIE_SECURE=True):
        response = client.post("/accounts/login/", {"username": "staffer", "password": "right-horse-battery"})
    assert response.status_code == 302
    session = response.cookies["sessionid"]
    assert session["httponly"] and session["secure"]
    assert session["samesite"] == "Lax"


@pytest.mark.django_db
@pytest.mark.parametrize("login_path", ["/accounts/login/", "/admin/login/"])
def test_repeated_wrong_passwords_lock_the_login_out(client, login_path):
    get_user_model().objects.create_user("target", password="right-horse-battery", is_staff=True)
    with override_settings(AXES_ENABLED=True, AXES_FAILURE_LIMIT=3):
        codes = [
            client.post(login_path, {"username": "target", "password": f"guess-{i}"}).status_code for i in range(3)
        ]
        assert codes[:2] == [200, 200]  # the form again, with an error
        assert codes[2] == 429
        # Locked out: even the right password is refused now.
        response = client.post(login_path, {"username": "target", "password": "right-horse-battery"})
        assert response.status_code == 429
        assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_refused_purchases_are_not_logged_one_line_each_but_other_4xx_are(caplog):
    from rest_framework.test import APIClient

    from seckill.sale.activities import activity_token_ensure

    from ..factories import make_activity, make_users

    activity = make_activity(stock=1)
    buyer, late = make_users(2)
    token = activity_token_ensure(activity_id=activity.pk)
    client = APIClient()
    client.force_authenticate(buyer)
    assert client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json").status_code == 202
    client.force_authenticate(late)
    with caplog.at_level("WARNING", logger="django.request"):
        refused = client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json")
        missing = client.get("/api/activities/999999/")
    assert (refused.status_code, missing.status_code) == (410, 404)
    logged = [r.getMessage() for r in caplog.records if r.name == "django.request"]
    assert not any("/purchase" in line for line in logged), logged
    assert any("999999" in line for line in logged), logged


# --- safe defaults: every entry point is production unless told otherwise --------------

ENTRY_POINTS = {
    "manage.py": [
        sys.executable,
        "manage.py",
        "shell",
        "-c",
        "from django.conf import settings as s; print(s.SETTINGS_MODULE)",
    ],
    "config.wsgi": [
        sys.executable,
        "-c",
        "import config.wsgi; from django.conf import settings as s; print(s.SETTINGS_MODULE)",
    ],
    "config.asgi": [
        sys.executable,
        "-c",
        "import config.asgi; from django.conf import settings as s; print(s.SETTINGS_MODULE)",
    ],
    "config.celery_app": [
        sys.executable,
        "-c",
        "import os, config.celery_app; print(os.environ['DJANGO_SETTINGS_MODULE'])",
    ],
}


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_every_entry_point_defaults_to_the_production_settings(entry_point):
    env = production_env()
    env.pop("DJANGO_SETTINGS_MODULE")
    result = subprocess.run(
        ENTRY_POINTS[entry_point], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "config.settings.production"


def local_env(**extra) -> dict:
    env = subprocess_env(DJANGO_SETTINGS_MODULE="config.settings.local")
    for name in ("DJANGO_DEBUG", "DJANGO_ALLOWED_HOSTS", "DJANGO_SECRET_KEY", "PAYMENT_GATEWAY_SECRET"):
        env.pop(name, None)
    env.update(extra)
    return env


def test_local_settings_on_loopback_pass_the_checks():
    result = manage("check", env=local_env())
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("hosts", ["shop.example.com", "*", "localhost,10.0.0.7"])
def test_debug_with_a_public_host_fails_start_up(hosts):
    result = manage("check", env=local_env(DJANGO_ALLOWED_HOSTS=hosts))
    assert result.returncode != 0
    assert "DEBUG" in result.stderr and "core.E001" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "name, value",
    [
        ("DJANGO_SECRET_KEY", "local-development-only-not-secret"),
        ("DJANGO_SECRET_KEY", "test-only-not-secret"),
        ("PAYMENT_GATEWAY_SECRET", "local-gateway-secret-not-secret"),
        ("PAYMENT_GATEWAY_SECRET", "test-gateway-secret"),
    ],
)
def test_production_refuses_a_known_development_secret(name, value):
    result = manage("check", env=production_env(**{name: value}))
    assert result.returncode != 0
    assert "core.E002" in result.stderr and name in result.stderr, result.stderr


def test_the_known_development_secrets_are_the_development_settings_defaults():
    from core.safety import DEVELOPMENT_SECRETS

    script = "from django.conf import settings as s; print(s.SECRET_KEY); print(s.PAYMENT_GATEWAY_SECRET)"
    for env in (local_env(), subprocess_env()):
        env.pop("DJANGO_SECRET_KEY", None)
        env.pop("PAYMENT_GATEWAY_SECRET", None)
        result = manage("shell", "-c", script, env=env)
        assert result.returncode == 0, result.stderr
        for secret in result.stdout.split()[-2:]:
            assert secret in DEVELOPMENT_SECRETS, secret


MAIL_SETTINGS = (
    "from django.conf import settings as s; print(s.EMAIL_BACKEND, s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_USE_TLS)"
)


def mail_settings(env: dict) -> list[str]:
    return manage("shell", "-c", MAIL_SETTINGS, env=env).stdout.strip().splitlines()[-1].split()


def test_production_without_a_mail_server_starts_and_its_deploy_check_warns():
    env = production_env()
    env.pop("EMAIL_URL")
    assert manage("check", env=env).returncode == 0
    deploy = manage("check", "--deploy", env=env)
    assert deploy.returncode == 0 and "accounts.W001" in deploy.stderr + deploy.stdout
    assert mail_settings(env) == ["django.core.mail.backends.smtp.EmailBackend", "localhost", "25", "False"]


def test_production_mail_server_from_email_host_and_friends():
    env = production_env(EMAIL_HOST="mail.example.com", EMAIL_PORT="587", EMAIL_USE_TLS="true")
    env.pop("EMAIL_URL")
    assert mail_settings(env) == ["django.core.mail.backends.smtp.EmailBackend", "mail.example.com", "587", "True"]


# --- connection URLs never shown: debug pages and logs -----------------------------------


def _secret_url_in_a_frame(password: str):
    broker = f"amqp://shop:{password}@mq.internal:5672//"  # noqa: F841 - a local the debug page lists
    raise RuntimeError("boom")


def test_the_debug_page_shows_no_connection_url(settings, rf):
    from django.views.debug import technical_500_response

    password = secrets.token_hex(8)  # made here: the page also shows this test's source lines
    settings.DEBUG = True
    settings.CELERY_BROKER_URL = f"redis://:{password}@redis.internal:6379/1"
    settings.SECKILL_REDIS_URL = f"redis://:{password}@redis.internal:6379/0"
    settings.SENTRY_DSN = f"https://{password}@sentry.example.com/1"
    request = rf.get("/boom", DATABASE_URL=f"postgres://shop:{password}@db.internal/shop")
    try:
        _secret_url_in_a_frame(password + "x")
    except RuntimeError:
        response = technical_500_response(request, *sys.exc_info())
    page = response.content.decode()
    assert "RuntimeError" in page and "mq.internal" in page
    for leaked in (settings.DATABASE_URL, settings.REDIS_URL, settings.CACHES["default"]["LOCATION"]):
        assert leaked not in page
    assert password not in page


def test_log_lines_carry_no_password_of_a_url(caplog):
    import logging

    (handler,) = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler) and h.filters]
    record = logging.LogRecord(
        "x", logging.WARNING, __file__, 1, "broker %s unreachable", ("amqp://u:log-hunter2@mq//",), None
    )
    try:
        raise ConnectionError("redis://:exc-hunter2@redis.internal:6379/0 refused")
    except ConnectionError:
        record.exc_info = sys.exc_info()
    assert handler.filter(record)
    line = handler.format(record)
    assert "mq//" in line and "redis.internal" in line
    assert "hunter2" not in line
