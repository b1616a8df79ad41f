"""Throttles of sign-up, password reset, login (by address, by username, on top of axes'
pair) and of the pay and cancel calls: real requests, counted in the real cache Redis."""

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.test import Client, override_settings

from tests.factories import UserFactory
from tests.mail_fixtures import celery_eager  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db

PASSWORD = "a-Long-and-unusual-secret-42"


def throttles(**rates):
    return override_settings(
        RATELIMIT_ENABLE=True, RATELIMIT_RATES={**getattr(settings, "RATELIMIT_RATES", {}), **rates}
    )


def from_address(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def login(client: Client, username: str, password: str, path: str = "/accounts/login/"):
    return client.post(path, {"username": username, "password": password})


def assert_throttled_page(response):
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert response["Content-Type"].startswith("text/html")
    assert b"Too many attempts" in response.content


def test_signup_is_throttled_by_address():
    form = {"password1": PASSWORD, "password2": PASSWORD}
    with throttles(**{"signup-address": "3/h"}):
        client = from_address("198.51.100.7")
        for n in range(3):
            assert (
                client.post(
                    "/accounts/signup/", {"username": f"new{n}", "email": f"new{n}@example.com", **form}
                ).status_code
                == 302
            )
            client.logout()
        refused = client.post("/accounts/signup/", {"username": "new3", "email": "new3@example.com", **form})
        assert_throttled_page(refused)
        assert not get_user_model().objects.filter(username="new3").exists()
        # Another address is not held back; reading the form is never counted.
        assert client.get("/accounts/signup/").status_code == 200
        assert (
            from_address("198.51.100.8")
            .post("/accounts/signup/", {"username": "new4", "email": "new4@example.com", **form})
            .status_code
            == 302
        )


def test_password_reset_is_throttled_and_never_tells_whether_an_address_is_registered(mailoutbox, celery_eager):  # noqa: F811
    # The reset mail is a Celery task's: run here (eager), it lands in the outbox.
    UserFactory(username="known", email="known@example.com")
    with throttles(**{"password-reset-email": "2/h", "password-reset-address": "100/h"}):
        client = from_address("198.51.100.9")

        def ask(email: str):
            response = client.post("/accounts/password_reset/", {"email": email})
            # Retry-After is present on a 429 whoever asks (its value depends on the window only).
            assert (response.status_code == 429) == response.has_header("Retry-After")
            return response.status_code, response.get("Location")

        answers = {email: [ask(email) for _ in range(3)] for email in ("known@example.com", "nobody@example.com")}
        assert answers["known@example.com"] == answers["nobody@example.com"]
        assert [status for status, _ in answers["known@example.com"]] == [302, 302, 429]
        assert len(mailoutbox) == 2  # the registered address got its two mails, no more
    with throttles(**{"password-reset-address": "2/h"}):
        client = from_address("198.51.100.10")
        assert [
            client.post("/accounts/password_reset/", {"email": f"x{n}@example.com"}).status_code for n in range(3)
        ] == [
            302,
            302,
            429,
        ]


@pytest.mark.parametrize("path", ["/accounts/login/", f"/{settings.ADMIN_URL}login/"])
def test_login_is_throttled_by_address_alone_spraying_many_usernames(path):
    with throttles(**{"login-address": "5/5m"}):
        sprayer = from_address("203.0.113.5")
        answers = [login(sprayer, f"user{n}", "guess").status_code for n in range(6)]
        assert answers == [200] * 5 + [429]
        assert_throttled_page(login(sprayer, "user99", "guess"))
        assert login(from_address("203.0.113.6"), "user0", "guess").status_code == 200


def test_scanner_failures_for_a_username_throttle_the_scanner_not_the_shopper():
    UserFactory(username="alice", password=PASSWORD)
    with throttles(**{"login-username": "4/15m", "login-address": "100/5m"}):
        scanners = [from_address(f"203.0.113.{20 + n}") for n in range(4)]
        for scanner in scanners:
            assert login(scanner, "alice", "wrong").status_code == 200  # the form again, below the limit
        # Past the username's limit: each wrong password answers 429, and an address that
        # failed for alice is refused even with the right password.
        assert_throttled_page(login(from_address("203.0.113.40"), "alice", "wrong-again"))
        assert_throttled_page(login(scanners[0], "alice", PASSWORD))
        # Alice, from an address that has not failed, gets in with her password.
        alice = from_address("192.0.2.77")
        answer = login(alice, "alice", PASSWORD)
        assert answer.status_code == 302
        assert alice.session[SESSION_KEY] == str(get_user_model().objects.get(username="alice").pk)


@override_settings(AXES_ENABLED=True)
def test_axes_pair_lockout_still_applies_on_top():
    UserFactory(username="bob", password=PASSWORD)
    with throttles(**{"login-username": "100/15m", "login-address": "100/5m"}):
        client = from_address("203.0.113.60")
        for _ in range(settings.AXES_FAILURE_LIMIT):
            login(client, "bob", "wrong")
        assert login(client, "bob", PASSWORD).status_code == 429
        assert login(from_address("203.0.113.61"), "bob", PASSWORD).status_code == 302


@pytest.mark.parametrize("action", ["pay", "cancel"])
def test_pay_and_cancel_api_answer_429_rate_limited_with_retry_after(action):
    client = Client()
    client.force_login(UserFactory())
    with throttles(**{f"order-{action}": "3/m"}):
        statuses = [client.post(f"/api/orders/NO-SUCH-{n}/{action}").status_code for n in range(3)]
        assert statuses == [404, 404, 404]
        refused = client.post(f"/api/orders/NO-SUCH/{action}")
        assert refused.status_code == 429
        assert refused.json()["code"] == "rate_limited" and refused.json()["detail"]
        assert int(refused["Retry-After"]) >= 1
        other = Client()
        other.force_login(UserFactory())
        assert other.post(f"/api/orders/NO-SUCH/{action}").status_code == 404  # per shopper


@pytest.mark.parametrize("action", ["pay", "cancel"])
def test_pay_and_cancel_pages_answer_a_readable_429(action):
    client = Client()
    client.force_login(UserFactory())
    with throttles(**{f"order-{action}": "2/m"}):
        assert [client.post(f"/orders/NO-SUCH-{n}/{action}/").status_code for n in range(2)] == [404, 404]
        assert_throttled_page(client.post(f"/orders/NO-SUCH/{action}/"))
