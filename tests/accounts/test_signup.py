"""Sign-up asks for an e-mail address: required, valid, one active account per address
whatever its case; the page's language is kept for the shopper's mails."""

import pytest
from django.contrib.auth import SESSION_KEY, get_user_model
from django.test import Client

from accounts.models import AccountProfile
from tests.factories import UserFactory

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
