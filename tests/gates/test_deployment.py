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

    from seckill.activities import activity_token_ensure

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
