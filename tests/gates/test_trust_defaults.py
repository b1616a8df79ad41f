"""Defaults to trust: secure cookies and HSTS that do not hang on the SSL redirect, the
language cookie like the others, API docs served from this origin, rates that mean a
limit, the publish action for those who may change, and the sale's start on the database's clock."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone

from seckill.models import Activity, validate_rate
from seckill.sale.activities import activity_token_ensure
from tests.factories import make_activity

from ..helpers import BASE_DIR
from .test_deployment import manage, production_env

SECURITY = [
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "LANGUAGE_COOKIE_SECURE",
    "LANGUAGE_COOKIE_HTTPONLY",
    "LANGUAGE_COOKIE_SAMESITE",
    "SECURE_HSTS_SECONDS",
]


def production_settings(**env) -> dict:
    script = "import json; from django.conf import settings as s; "
    script += f"print(json.dumps({{n: getattr(s, n) for n in {SECURITY!r}}}))"
    result = manage("shell", "-c", script, env=production_env(**env))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_cookies_and_hsts_stay_secure_without_the_ssl_redirect():
    default = production_settings()
    assert default["SECURE_SSL_REDIRECT"] and default["SECURE_HSTS_SECONDS"] >= 31536000
    behind_proxy = production_settings(DJANGO_SECURE_SSL_REDIRECT="false")
    assert behind_proxy["SECURE_SSL_REDIRECT"] is False
    assert behind_proxy["SESSION_COOKIE_SECURE"] and behind_proxy["CSRF_COOKIE_SECURE"]
    assert behind_proxy["LANGUAGE_COOKIE_SECURE"]
    assert behind_proxy["SECURE_HSTS_SECONDS"] >= 31536000
    # Only their own variables turn them off (plain HTTP on loopback, the benchmarks).
    plain = production_settings(
        DJANGO_SECURE_SSL_REDIRECT="false",
        DJANGO_SECURE_COOKIES="false",
        DJANGO_SECURE_HSTS_SECONDS="0",
    )
    assert not plain["SESSION_COOKIE_SECURE"] and not plain["CSRF_COOKIE_SECURE"]
    assert not plain["LANGUAGE_COOKIE_SECURE"] and plain["SECURE_HSTS_SECONDS"] == 0


def test_language_cookie_is_secure_and_lax_in_production():
    values = production_settings()
    assert values["LANGUAGE_COOKIE_SECURE"] and values["LANGUAGE_COOKIE_SAMESITE"] == "Lax"
    # The cached page's script reads it (and sets it Secure over HTTPS): not HttpOnly.
    assert values["LANGUAGE_COOKIE_HTTPONLY"] is False
    script = (BASE_DIR / "static" / "seckill" / "shop.js").read_text()
    assert '"https:" ? "; secure"' in script


@pytest.mark.parametrize("rate", ["10/0s", "0/s", "0/5m", "5/00m", "-1/s", "1/", "s"])
def test_rates_without_a_limit_or_refusing_all_are_invalid(rate):
    with pytest.raises(ValidationError):
        validate_rate(rate)


@pytest.mark.parametrize("rate", ["10/s", "1/5m", "600/m", "100/1h", "off", ""])
def test_real_rates_stay_valid(rate):
    validate_rate(rate)


def test_start_up_check_refuses_a_rate_that_limits_nothing():
    result = manage("check", env=production_env(SECKILL_RATE_PER_USER="10/0s"))
    assert result.returncode != 0 and "SECKILL_RATE_PER_USER" in result.stderr


@pytest.mark.django_db
def test_api_docs_are_served_from_this_origin_under_the_site_policy():
    client = Client()
    for path in ["/api/docs/", "/api/redoc/"]:
        page = client.get(path)
        assert page.status_code == 200, path
        body = page.content.decode()
        assert "cdn.jsdelivr.net" not in body and "googleapis" not in body and "https://" not in body
        assert "/static/drf_spectacular_sidecar/" in body
        policy = page["Content-Security-Policy"]
        assert "https:" not in policy and "cdn" not in policy
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())
        assert directives["script-src"] == "'self'"
    asset = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert asset.status_code == 200


@pytest.mark.django_db
def test_view_only_staff_are_not_offered_publish_nor_can_run_it(tmp_path):
    activity = make_activity(warm=False)
    reviewer = get_user_model().objects.create_user("reviewer", password="x", is_staff=True)
    reviewer.user_permissions.add(Permission.objects.get(codename="view_activity"))
    client = Client()
    client.force_login(reviewer)
    url = "/admin/seckill/activity/"
    with override_settings(SECKILL_PUBLISH_DIR=tmp_path):
        page = client.get(url)
        assert page.status_code == 200
        assert 'value="publish"' not in page.content.decode()
        client.post(url, {"action": "publish", "_selected_action": [activity.pk], "index": 0})
        assert not any(tmp_path.iterdir()), "a view-only reviewer published pages"


def _database_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_the_purchase_token_waits_for_the_database_clock_not_the_web_process():
    starts = _database_now() + timedelta(minutes=10)
    activity = make_activity(warm=False, start_at=starts, end_at=starts + timedelta(hours=1))
    # A web process whose clock runs 11 minutes fast believes the sale has started.
    assert activity_token_ensure(activity_id=activity.pk, now=timezone.now() + timedelta(minutes=11)) is None
    assert Activity.objects.get(pk=activity.pk).purchase_token is None


@pytest.mark.django_db
def test_close_waits_for_the_database_clock(monkeypatch):
    from seckill.sale import lifecycle
    from seckill.sale.lifecycle import WarmupError, activity_close

    ended = _database_now() + timedelta(minutes=10)
    activity = make_activity(start_at=ended - timedelta(hours=1), end_at=ended)
    fast = timezone.now() + timedelta(minutes=11)
    monkeypatch.setattr(lifecycle.timezone, "now", lambda: fast)  # the web process's clock only
    with pytest.raises(WarmupError):
        activity_close(activity_id=activity.pk)
    assert Activity.objects.get(pk=activity.pk).status == Activity.Status.WARMED


def _style_src(response) -> str:
    policy = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())["style-src"]


@pytest.mark.django_db
def test_no_inline_style_is_allowed_and_the_pages_need_none():
    from seckill.sale.reconciliation import reconcile

    activity = make_activity()
    reconcile(activity_id=activity.pk)
    for path in ["/", "/accounts/login/", "/accounts/signup/", "/api/docs/"]:
        page = Client().get(path)
        assert page.status_code == 200 and _style_src(page) == "'self'", path
        assert "<style" not in page.content.decode() and ' style="' not in page.content.decode(), path
    staff = get_user_model().objects.create_superuser("auditor", password="x")
    client = Client()
    client.force_login(staff)
    report = client.get(f"/admin/orders/reconciliationreport/activity/{activity.pk}/")
    assert report.status_code == 200 and _style_src(report) == "'self'"
    body = report.content.decode()
    assert "<style" not in body and ' style="' not in body.split('id="content"', 1)[1]
    assert body.count('src="data:image/svg+xml') == 3  # the charts, each an image with its own styles
    for template in (BASE_DIR / "templates").rglob("*.html"):
        assert ' style="' not in template.read_text() and "<style" not in template.read_text(), template
