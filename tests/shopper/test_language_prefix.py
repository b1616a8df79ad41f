"""Every shopper page under the language prefix the site uses (issue 42): /zh-hans/,
/zh-hans/orders/, /zh-hans/products/, /zh-hans/orders/address/, the account pages…
answer in Chinese for any browser, their links stay in Chinese, the switch leaves the
prefix; the unprefixed URLs still follow the visitor's choice; a prefix that is no
language of the shop is a 404."""

import re

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from orders.models import Order
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot
from tests.factories import ProductFactory, UserFactory, make_activity
from tests.orders.addresses import give_address

pytestmark = pytest.mark.django_db


@pytest.fixture
def shopper():
    """An English browser's shopper with an address and a pending order."""
    activity = make_activity(stock=5, title="Sale")
    user = UserFactory()
    give_address(user)
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    client = Client(HTTP_ACCEPT_LANGUAGE="en-US")
    client.force_login(user)
    return client, Order.objects.get(activity=activity, user=user), activity


def test_every_shopper_page_answers_under_the_prefix_in_chinese(shopper):
    client, order, activity = shopper
    product = ProductFactory(name="Pot")
    pages = {
        "/zh-hans/": "秒杀活动",
        "/zh-hans/products/": "商品",
        f"/zh-hans/products/{product.pk}/": "Pot",
        "/zh-hans/orders/": "我的订单",
        "/zh-hans/orders/address/": "收货地址",
        f"/zh-hans/orders/{order.order_no}/": f"订单 {order.order_no}",
    }
    for path, words in pages.items():
        response = client.get(path)
        assert response.status_code == 200, path
        assert response["Content-Language"] == "zh-hans", path
        body = response.content.decode()
        assert words in body, path
        # Its links stay in Chinese (the menu, the sale's page).
        assert 'href="/zh-hans/orders/"' in body and 'href="/zh-hans/products/"' in body, path
    orders = client.get("/zh-hans/orders/").content.decode()
    assert f'href="/zh-hans/orders/{order.order_no}/"' in orders
    assert f'href="/zh-hans/seckill/{activity.pk}/"' in orders


def test_the_unprefixed_pages_still_follow_the_visitor(shopper):
    client, _, _ = shopper
    english = client.get("/orders/")
    assert english.status_code == 200 and english["Content-Language"] == "en"
    assert 'href="/orders/"' in english.content.decode()
    chinese_browser = Client(HTTP_ACCEPT_LANGUAGE="zh-CN")
    home = chinese_browser.get("/")
    assert home.status_code == 200 and home["Content-Language"] == "zh-hans"


def switch_next(html: str, language: str) -> str:
    """The page's switch to ``language``: the ``next`` its form posts."""
    pattern = rf'name="next" type="hidden" value="([^"]*)"><button type="submit" name="language" value="{language}"'
    form = re.search(pattern, html)
    assert form, language
    return form.group(1)


def test_the_switch_leaves_the_prefix(shopper):
    client, _, _ = shopper
    page = client.get("/zh-hans/orders/?x=1").content.decode()
    assert switch_next(page, "en") == "/orders/?x=1" and switch_next(page, "zh-hans") == "/zh-hans/orders/?x=1"
    back = client.post(
        "/i18n/setlang/",
        {"language": "en", "next": switch_next(page, "en"), "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
    )
    assert back.status_code == 302 and back["Location"] == "/orders/?x=1"
    assert client.get("/orders/")["Content-Language"] == "en"
    there = client.post(
        "/i18n/setlang/",
        {"language": "zh-hans", "next": "/orders/", "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
    )
    assert there.status_code == 302 and there["Location"] == "/zh-hans/orders/"


@pytest.mark.parametrize("path", ["/fr/orders/", "/zh-hans/nowhere/", "/zh-hans/zh-hans/orders/", "/en/orders/"])
def test_a_prefix_of_no_language_or_no_page_is_a_404(shopper, path):
    client, _, _ = shopper
    assert client.get(path).status_code == 404


def test_the_providers_notification_urls_have_no_prefix(shopper):
    client, _, _ = shopper
    assert Client().post("/zh-hans/payments/process/simulated-webhook/").status_code == 404
    assert client.get("/zh-hans/api/me").status_code == 404


def test_every_account_page_answers_under_the_prefix_in_chinese():
    """Login, sign-up, the password reset and its pages, logout: in Chinese under
    /zh-hans/ for an English browser, their links and redirects staying in Chinese."""
    user = UserFactory(username="lihua", email="lihua@example.com")
    reset = f"/zh-hans/accounts/reset/{urlsafe_base64_encode(force_bytes(user.pk))}/"
    pages = {
        "/zh-hans/accounts/login/": "忘记密码？",
        "/zh-hans/accounts/signup/": "注册",
        "/zh-hans/accounts/password_reset/": "忘记密码？",
        "/zh-hans/accounts/password_reset/done/": "请查收邮件",
        f"{reset}{default_token_generator.make_token(user)}/": "设置新密码",
        f"{reset}not-a-token/": "此链接已失效",
        "/zh-hans/accounts/reset/done/": "密码已更改",
    }
    client = Client(HTTP_ACCEPT_LANGUAGE="en-US")
    for path, words in pages.items():
        response = client.get(path, follow=True)
        assert response.status_code == 200, path
        assert response["Content-Language"] == "zh-hans", path
        body = response.content.decode()
        assert words in body, path
        # The menu's account links stay in Chinese, with no way back to an account page.
        assert 'href="/zh-hans/accounts/login/"' in body and 'href="/zh-hans/accounts/signup/"' in body, path
        assert switch_next(body, "zh-hans").startswith("/zh-hans/accounts/"), path
        assert switch_next(body, "en").startswith("/accounts/"), path
    login = client.get("/zh-hans/accounts/login/").content.decode()
    assert 'href="/zh-hans/accounts/password_reset/" id="forgot-password"' in login
    asked = client.post("/zh-hans/accounts/password_reset/", {"email": "lihua@example.com"})
    assert asked["Location"] == "/zh-hans/accounts/password_reset/done/"
    assert client.get("/zh-hans/orders/")["Location"] == "/zh-hans/accounts/login/?next=/zh-hans/orders/"
    signed_in = client.post("/zh-hans/accounts/login/", {"username": "lihua", "password": "pw-for-tests"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/zh-hans/"
    logged_out = client.post("/zh-hans/accounts/logout/")
    assert logged_out.status_code == 302 and logged_out["Location"] == "/zh-hans/"


def test_the_english_account_pages_switch_to_their_chinese_urls():
    for path in ("/accounts/login/", "/accounts/signup/", "/accounts/password_reset/"):
        body = Client(HTTP_ACCEPT_LANGUAGE="en-US").get(path).content.decode()
        assert switch_next(body, "zh-hans") == f"/zh-hans{path}", path
        assert 'href="/accounts/login/"' in body and 'href="/accounts/signup/"' in body, path
