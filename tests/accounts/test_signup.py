"""Sign-up asks for an e-mail address: required, valid, one active account per address
whatever its case, held by the database against concurrent sign-ups too; the page's
language is kept for the shopper's mails."""

import threading

import pytest
from django.contrib.auth import SESSION_KEY, get_user_model
from django.core.management import call_command
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.test import Client

from accounts.models import AccountProfile
from tests.factories import UserFactory
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db

PASSWORD = "a-Long-and-unusual-secret-42"


def signup(client: Client, path: str = "/accounts/signup/", **fields):
    return client.post(path, {"password1": PASSWORD, "password2": PASSWORD, **fields})


def test_the_signup_page_asks_for_an_email_address():
    page = Client().get("/accounts/signup/").content.decode()
    assert 'name="email"' in page and 'type="email"' in page


def test_signup_without_an_email_address_is_refused():
    response = signup(Client(), username="noemail")
    assert response.status_code == 200
    assert "email" in response.context["form"].errors
    assert not get_user_model().objects.filter(username="noemail").exists()


@pytest.mark.parametrize("address", ["not-an-address", "a@", "@example.com", "x" * 250 + "@example.com"])
def test_signup_with_an_invalid_email_address_is_refused(address):
    response = signup(Client(), username="bad", email=address)
    assert response.status_code == 200
    assert "email" in response.context["form"].errors
    assert not get_user_model().objects.filter(username="bad").exists()


def test_an_address_taken_by_an_active_account_is_refused_whatever_its_case():
    UserFactory(username="first", email="Shopper@Example.com")
    response = signup(Client(), username="second", email="shopper@example.COM")
    assert response.status_code == 200
    assert response.context["form"].errors["email"] == ["An account with this e-mail address exists already."]
    assert not get_user_model().objects.filter(username="second").exists()


def test_an_address_of_a_deactivated_account_may_sign_up_again():
    UserFactory(username="gone", email="back@example.com", is_active=False)
    assert signup(Client(), username="returning", email="back@example.com").status_code == 302


def test_signup_keeps_the_address_logs_in_and_remembers_the_language():
    client = Client()
    response = signup(client, path="/accounts/signup/?next=/orders/", username="newbie", email="newbie@example.com")
    assert response.status_code == 302 and response["Location"] == "/orders/"
    user = get_user_model().objects.get(username="newbie")
    assert user.email == "newbie@example.com"
    assert str(client.session[SESSION_KEY]) == str(user.pk)
    assert AccountProfile.objects.get(user=user).language == "en"
    other = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert signup(other, username="xiaoming", email="xm@example.com").status_code == 302
    assert AccountProfile.objects.get(user__username="xiaoming").language == "zh-hans"


TAKEN = "An account with this e-mail address exists already."


def test_the_database_holds_one_active_account_per_address_whatever_its_case():
    User = get_user_model()
    User.objects.create_user("first-holder", email="Holder@Example.com")
    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.create_user("second-holder", email="holder@example.COM")
    User.objects.create_user("former-holder", email="HOLDER@example.com", is_active=False)
    User.objects.create_user("no-mail-1", email="")
    User.objects.create_user("no-mail-2", email="")


def signups_waiting_on_the_table() -> int:
    """Sessions waiting for the lock that the test holds on the users' table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
            [get_user_model()._meta.db_table],
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_concurrent_signups_with_one_address_make_one_account_and_the_others_see_the_form_error():
    """Three sign-ups, one address in three cases, each in its own thread and connection.
    A lock on the users' table lets each pass the form's check, then holds their inserts
    until all three wait on it: the database alone decides."""
    addresses = ["Race@Example.com", "race@example.com", "RACE@EXAMPLE.COM"]
    answers: dict[str, tuple[int, str]] = {}

    def sign_up(index: int, address: str) -> None:
        try:
            client = Client(REMOTE_ADDR=f"192.0.2.{index + 1}")
            response = signup(client, username=f"racer{index}", email=address)
            answers[address] = (response.status_code, response.content.decode())
        finally:
            connection.close()

    threads = [threading.Thread(target=sign_up, args=(i, a)) for i, a in enumerate(addresses)]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {get_user_model()._meta.db_table} IN SHARE MODE")
        for thread in threads:
            thread.start()
        wait_until(
            lambda: signups_waiting_on_the_table() == len(threads) or not any(t.is_alive() for t in threads),
            timeout=30,
            what="the three sign-ups waiting on the table",
        )
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    accounts = list(get_user_model().objects.filter(email__iexact="race@example.com"))
    assert len(accounts) == 1, [a.username for a in accounts]
    statuses = sorted(status for status, _ in answers.values())
    assert statuses == [200, 200, 302]
    for status, body in answers.values():
        assert status == 302 or TAKEN in body


@pytest.mark.django_db(transaction=True)
def test_the_migration_names_the_accounts_that_share_an_address():
    """Existing data the unique index cannot hold: the migration stops and says who."""
    User = get_user_model()
    call_command("migrate", "accounts", "0001", verbosity=0)
    try:
        User.objects.create_user("twin-a", email="Twin@example.com")
        User.objects.create_user("twin-b", email="twin@EXAMPLE.com")
        with pytest.raises(DatabaseError, match=r"twin@example\.com: twin-a, twin-b"):
            call_command("migrate", "accounts", verbosity=0)
        User.objects.filter(username="twin-b").update(email="")
        call_command("migrate", "accounts", verbosity=0)
        with pytest.raises(IntegrityError), transaction.atomic():
            User.objects.create_user("twin-c", email="TWIN@example.com")
    finally:
        User.objects.filter(username__startswith="twin-").delete()
        call_command("migrate", "accounts", verbosity=0)


def test_the_admin_adds_accounts_without_an_address_and_refuses_a_taken_one(admin_client):
    for name in ("staff-one", "staff-two"):
        fields = {"username": name, "password1": PASSWORD, "password2": PASSWORD, "usable_password": "true"}
        assert admin_client.post("/admin/auth/user/add/", fields).status_code == 302, name
    UserFactory(username="holder", email="Holder@example.com")
    staff = get_user_model().objects.get(username="staff-one")
    change = {
        "username": "staff-one",
        "email": "holder@EXAMPLE.com",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    refused = admin_client.post(f"/admin/auth/user/{staff.pk}/change/", change)
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["email"] == [TAKEN]
    assert admin_client.post(f"/admin/auth/user/{staff.pk}/change/", {**change, "is_active": ""}).status_code == 302
