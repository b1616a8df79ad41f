"""Accounts, catalog, the sale list, and the language switch."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.factories import ProductFactory, UserFactory, make_activity

pytestmark = pytest.mark.django_db


def test_sign_up_log_out_log_in():
    client = Client()
    assert client.get("/accounts/signup/").status_code == 200
    response = client.post(
        "/accounts/signup/",
        {
            "username": "newshopper",
            "email": "newshopper@example.com",
            "password1": "a-long-Pass-phrase-9",
            "password2": "a-long-Pass-phrase-9",
        },
    )
    assert response.status_code == 302
    assert get_user_model().objects.filter(username="newshopper").exists()
    assert client.get("/api/me").json()["authenticated"] is True
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/api/me").json()["authenticated"] is False
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b'<label for="id_username">' in page.content
    response = client.post("/accounts/login/", {"username": "newshopper", "password": "a-long-Pass-phrase-9"})
    assert response.status_code == 302
    assert client.get("/api/me").json()["username"] == "newshopper"


def test_sign_up_does_not_redirect_off_site():
    response = Client().post(
        "/accounts/signup/?next=https://evil.example/",
        {
            "username": "x1",
            "email": "x1@example.com",
            "password1": "a-long-Pass-phrase-9",
            "password2": "a-long-Pass-phrase-9",
        },
    )
    assert response.status_code == 302 and response["Location"] == "/"


def test_catalog_and_sale_list():
    product = ProductFactory(name="Tea pot", description="Pours well.")
    activity = make_activity(product=product, title="Pot for a penny")
    products = Client().get("/products/")
    assert products.status_code == 200 and b"Tea pot" in products.content
    detail = Client().get(f"/products/{product.pk}/")
    assert detail.status_code == 200 and b"Pot for a penny" in detail.content
    assert f'href="/seckill/{activity.pk}/"'.encode() in detail.content
    assert Client().get("/products/999999/").status_code == 404
    sales = Client().get("/")
    assert sales.status_code == 200 and b"Pot for a penny" in sales.content


def test_language_follows_the_browser_and_the_switch():
    activity = make_activity(title="Sale")
    chinese = Client(HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").get("/")
    assert chinese["Content-Language"] == "zh-hans" and "秒杀活动".encode() in chinese.content
    # Links from a Chinese page lead to the Chinese activity page.
    assert f'href="/zh-hans/seckill/{activity.pk}/"'.encode() in chinese.content
    english = Client(HTTP_ACCEPT_LANGUAGE="en-US").get("/")
    assert english["Content-Language"] == "en" and b"Flash sales" in english.content

    client = Client(HTTP_ACCEPT_LANGUAGE="en-US")
    client.get("/api/me")
    switched = client.post(
        "/i18n/setlang/",
        {"language": "zh-hans", "next": "/orders/", "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
    )
    assert switched.status_code == 302
    assert client.get("/").headers["Content-Language"] == "zh-hans"


def test_orders_page_in_chinese():
    user = UserFactory()
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-CN")
    client.force_login(user)
    page = client.get("/orders/")
    assert page.status_code == 200 and "我的订单".encode() in page.content


def test_the_committed_mo_matches_the_po():
    """The compiled catalogue is committed (no gettext needed to test); it must be current."""
    import gettext
    import re
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "locale" / "zh_Hans" / "LC_MESSAGES"
    po = (folder / "django.po").read_text(encoding="utf-8")
    with open(folder / "django.mo", "rb") as handle:
        mo = gettext.GNUTranslations(handle)
    pairs = re.findall(r'^msgid "(.+)"\nmsgstr "(.*)"$', po, flags=re.MULTILINE)
    assert len(pairs) > 100
    for msgid, msgstr in pairs:
        unescape = lambda s: s.replace('\\"', '"').replace("\\\\", "\\")  # noqa: E731
        assert msgstr, f"untranslated: {msgid}"
        assert mo.gettext(unescape(msgid)) == unescape(msgstr), f"django.mo is stale for {msgid!r}: run make messages"


def test_the_header_sign_up_and_log_in_links_keep_the_way_back():
    page = Client().get("/products/?x=1").content.decode()
    assert 'href="/accounts/signup/?next=/products/%3Fx%3D1"' in page
    assert 'href="/accounts/login/?next=/products/%3Fx%3D1"' in page
    # On the log-in page, the way back is the one it was given, not the log-in page.
    login = Client().get("/accounts/login/?next=/orders/").content.decode()
    assert 'href="/accounts/signup/?next=/orders/"' in login
    # An account page given none passes none on (not back to itself, nor to the logged-out page).
    for path in ("/accounts/login/", "/accounts/signup/"):
        page = Client().get(path).content.decode()
        assert 'href="/accounts/login/"' in page and 'href="/accounts/signup/"' in page, path


def test_signing_up_from_the_header_link_lands_where_the_shopper_was():
    response = Client().post(
        "/accounts/signup/?next=/products/",
        {
            "username": "back1",
            "email": "back1@example.com",
            "password1": "a-long-Pass-phrase-9",
            "password2": "a-long-Pass-phrase-9",
        },
    )
    assert response.status_code == 302 and response["Location"] == "/products/"


def test_the_favicon_is_served_to_everyone_and_cacheable():
    response = Client().get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO file
    cache_control = response["Cache-Control"]
    assert "public" in cache_control and "max-age=604800" in cache_control
    assert not response.cookies and "cookie" not in response.get("Vary", "").lower()
    assert Client().post("/favicon.ico").status_code == 405
    page = Client().get("/").content.decode()
    assert 'rel="icon" href="/static/seckill/favicon.svg"' in page


def test_one_language_switch_on_every_page_the_current_language_marked():
    activity = make_activity(started=False)
    dynamic = Client(HTTP_ACCEPT_LANGUAGE="zh-CN").get("/").content.decode()
    cached = Client().get(f"/zh-hans/seckill/{activity.pk}/").content.decode()
    for page in (dynamic, cached):
        switch = re.search(r'<nav class="lang".*?</nav>', page, re.S).group(0)
        assert "<select" not in page and "English" in switch and "简体中文" in switch
        current = re.findall(r'<(?:a|button)[^>]*aria-current="page"[^>]*>([^<]*)<', switch)
        assert current == ["简体中文"], current


def test_make_runs_shop_is_on_beijing_time_unless_told_otherwise():
    """`make run` (the local settings): the demo shop sells in yuan, its times are Beijing
    time; pages show them and the admin reads typed times in it (USE_TZ)."""
    import os
    import subprocess
    import sys

    from tests.helpers import BASE_DIR

    def zones(**extra: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_TIME_ZONE"}
        env.update(extra, DJANGO_SETTINGS_MODULE="config.settings.local")
        code = "from django.conf import settings as s; print(s.TIME_ZONE, s.CELERY_TIMEZONE, s.USE_TZ)"
        run = subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert zones() == "Asia/Shanghai Asia/Shanghai True"
    assert zones(DJANGO_TIME_ZONE="Europe/Paris") == "Europe/Paris Europe/Paris True"
