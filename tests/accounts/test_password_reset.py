"""Password reset in the shop's pages, linked from login; the mail is a Celery task's
and never tells whether an address has an account. Once end to end: a real worker sends
to a real SMTP server, the link in the mail sets a new password, the login works."""

import re

import pytest
from django.contrib.auth import SESSION_KEY
from django.test import Client

from tests.factories import UserFactory
from tests.helpers import start_celery_worker, wait_until
from tests.mail_fixtures import celery_eager, mail_env, smtp_server  # noqa: F401 - fixtures

NEW_PASSWORD = "a-Brand-new-and-long-secret-77"
RESET_LINK = re.compile(r"https?://[^/\s]+(/accounts/reset/[^\s]+/)")


def reset_pages(client: Client, body: str) -> Client:
    """Follow the link of a reset mail and set NEW_PASSWORD; answers the final page."""
    path = RESET_LINK.search(body).group(1)
    form = client.get(path, follow=True)
    assert form.status_code == 200 and 'name="new_password1"' in form.content.decode()
    done = client.post(
        form.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}, follow=True
    )
    assert done.status_code == 200 and 'id="reset-complete"' in done.content.decode()
    return client


@pytest.mark.django_db
def test_the_login_page_links_to_a_shop_styled_reset_page():
    login = Client().get("/accounts/login/").content.decode()
    assert 'href="/accounts/password_reset/" id="forgot-password"' in login
    for path in ("/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/done/"):
        page = Client().get(path).content.decode()
        assert "Django administration" not in page, path
        assert 'href="/static/seckill/site.css"' in page, path
    bad_link = Client().get("/accounts/reset/MQ/not-a-token/", follow=True).content.decode()
    assert 'id="reset-link-invalid"' in bad_link and "Django administration" not in bad_link


@pytest.mark.django_db
def test_known_and_unknown_addresses_get_the_same_answer_and_only_the_known_one_a_mail(mailoutbox, celery_eager):  # noqa: F811
    UserFactory(username="known", email="known@example.com")
    answers = [
        Client().post("/accounts/password_reset/", {"email": e}) for e in ("known@example.com", "no@example.com")
    ]
    assert [(a.status_code, a["Location"]) for a in answers] == [(302, "/accounts/password_reset/done/")] * 2
    assert [m.to for m in mailoutbox] == [["known@example.com"]]
    assert mailoutbox[0].subject == "Reset your password"
    assert reset_pages(Client(), mailoutbox[0].body)


@pytest.mark.django_db
def test_the_reset_request_only_enqueues_the_mail():
    """No worker, no eager mode: the answer comes and no mail was sent on the request's path."""
    from django.core import mail

    UserFactory(username="queued", email="queued@example.com")
    assert Client().post("/accounts/password_reset/", {"email": "queued@example.com"}).status_code == 302
    assert mail.outbox == []


@pytest.mark.django_db
def test_the_reset_mail_is_in_the_language_of_the_page(mailoutbox, celery_eager):  # noqa: F811
    UserFactory(username="lihua", email="lihua@example.com")
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert client.post("/accounts/password_reset/", {"email": "lihua@example.com"}).status_code == 302
    assert mailoutbox[0].subject == "重置您的密码"
    # Its link opens the Chinese page to choose the new password.
    assert "/zh-hans/accounts/reset/" in mailoutbox[0].body


def test_reset_through_a_real_worker_and_a_real_smtp_server(transactional_db, process_logs, smtp_server):  # noqa: F811
    inbox, email_url = smtp_server
    UserFactory(username="carol", email="carol@example.com")
    worker = start_celery_worker(process_logs, env=mail_env(email_url))
    try:
        assert Client().post("/accounts/password_reset/", {"email": "carol@example.com"}).status_code == 302
        bodies = wait_until(lambda: inbox.bodies_to("carol@example.com"), timeout=60, what="the reset mail")
    finally:
        worker.stop()
    client = reset_pages(Client(), bodies[0])
    assert not client.session.get(SESSION_KEY)
    login = client.post("/accounts/login/", {"username": "carol", "password": NEW_PASSWORD})
    assert login.status_code == 302 and client.session.get(SESSION_KEY)
