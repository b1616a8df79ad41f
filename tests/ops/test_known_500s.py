"""Requests that once answered 500, each answered now with a clear 4xx (or its page):
/api/me with a token that is no token, a lone surrogate in the captcha fields of a
purchase, a password reset with no mail server to send to."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from seckill.models import Activity
from seckill.sale.activities import activity_token_ensure
from seckill.sale.snapshot import activity_snapshot_forget
from server.handlers import StackDispatcher

from ..factories import make_activity, make_users, token_of
from ..helpers import wsgi_call

pytestmark = pytest.mark.django_db(transaction=True)


# A server hands the header over as Latin-1 text: UTF-8 bytes arrive as "Ã©".
@pytest.mark.parametrize("authorization", ["Token anything", "Token ", "token x y", "Token \xc3\xa9\xff"])
def test_me_with_a_token_that_is_no_token_is_a_401(authorization):
    answer = wsgi_call(StackDispatcher(), "GET", "/api/me", headers={"Authorization": authorization})
    assert answer["status"] == 401, answer
    assert json.loads(answer["body"])["code"] == "authentication_failed"


def test_me_with_a_real_token_names_its_shopper():
    (user,) = make_users(1, prefix="me")
    answer = wsgi_call(StackDispatcher(), "GET", "/api/me", headers={"Authorization": f"Token {token_of(user)}"})
    assert answer["status"] == 200, answer
    body = json.loads(answer["body"])
    assert (body["authenticated"], body["username"]) == (True, user.username)
    assert answer["headers"]["cache-control"] == ["no-store, max-age=0"]


def test_me_for_a_browser_and_for_nobody():
    (user,) = make_users(1, prefix="browser")
    browser = Client()
    browser.force_login(user)
    body = browser.get("/api/me").json()
    assert (body["authenticated"], body["username"]) == (True, user.username) and body["csrf_token"]
    nobody = Client().get("/api/me")
    assert nobody.status_code == 200
    assert (nobody.json()["authenticated"], nobody.json()["username"]) == (False, None)


@pytest.mark.parametrize("field", ["captcha_id", "captcha_answer"])
@pytest.mark.parametrize("value", ["\ud800", "ok\udfff", "\udc80" * 3])
def test_a_lone_surrogate_in_a_captcha_field_is_a_400(field, value):
    activity = make_activity(stock=5)
    Activity.objects.filter(pk=activity.pk).update(captcha_required=True)
    activity_snapshot_forget(activity.pk)
    (user,) = make_users(1, prefix="surrogate")
    body = {"token": activity_token_ensure(activity_id=activity.pk), "captcha_id": "x" * 24, "captcha_answer": "12"}
    body[field] = value
    url = f"/api/activities/{activity.pk}/purchase"
    fast = wsgi_call(StackDispatcher(), "POST", url, headers={"Authorization": f"Token {token_of(user)}"}, body=body)
    browser = Client(raise_request_exception=False)
    browser.force_login(user)
    session = browser.post(url, json.dumps(body), content_type="application/json")
    for status, answer in ((fast["status"], json.loads(fast["body"])), (session.status_code, session.json())):
        assert (status, answer["code"]) == (400, "invalid_request"), answer


def test_password_reset_outside_production_needs_no_mail_server(tmp_path):
    """The mail settings every non-production process gets (the tests' own processes
    included): the reset mail goes to the console, not to an SMTP server nobody runs."""
    from config.settings import base

    assert base.EMAIL_BACKEND == "django.core.mail.backends.console.EmailBackend"
    get_user_model().objects.create_user("forgetful", email="forgetful@example.com", password="pw-1234-long")
    with override_settings(EMAIL_BACKEND=base.EMAIL_BACKEND):
        response = Client(raise_request_exception=False).post(
            "/accounts/password_reset/", {"email": "forgetful@example.com"}
        )
    assert response.status_code == 302, response.content[:500]
    assert response["Location"].endswith("/accounts/password_reset/done/")
