"""The shipping address: kept per shopper, validated (hostile input is a form error or a
400 JSON, never a 500), asked for before payment and copied onto the order then."""

import json
from urllib.parse import quote

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from orders.models import Order, Payment, ShippingAddress
from orders.simulated import checkout_complete
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot
from tests.factories import UserFactory, make_activity

from .addresses import ADDRESS, give_address

pytestmark = pytest.mark.django_db


@pytest.fixture
def pending():
    """A shopper without an address and their pending order (the real purchase path)."""
    activity = make_activity(stock=3)
    user = UserFactory()
    purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    return user, Order.objects.get(activity=activity, user=user)


def api_of(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_api_pay_without_an_address_is_409_address_required(pending):
    user, order = pending
    response = api_of(user).post(f"/api/orders/{order.order_no}/pay")
    assert response.status_code == 409
    assert response.json()["code"] == "address_required"
    assert not Payment.objects.exists()
    order.refresh_from_db()
    assert order.shipping_address is None


def test_the_address_is_copied_when_payment_starts_and_a_later_edit_leaves_the_order(pending):
    user, order = pending
    api = api_of(user)
    assert api.get("/api/me/address").status_code == 404
    saved = api.put("/api/me/address", ADDRESS, format="json")
    assert saved.status_code == 200, saved.content
    assert {k: saved.json()[k] for k in ADDRESS} == ADDRESS
    assert api.get("/api/me/address").json()["city"] == "上海"

    started = api.post(f"/api/orders/{order.order_no}/pay")
    assert started.status_code == 200, started.content
    checkout_complete(payment=Payment.objects.get(order=order), outcome="succeeded")
    order.refresh_from_db()
    assert order.status == Order.Status.PAID and order.shipping_address == ADDRESS

    moved = api.put("/api/me/address", {**ADDRESS, "city": "杭州", "postal_code": "310000"}, format="json")
    assert moved.status_code == 200
    order.refresh_from_db()
    assert order.shipping_address["city"] == "上海"  # the paid order keeps where it was paid for
    detail = api.get(f"/api/orders/{order.order_no}/").json()
    assert detail["shipping_address"]["city"] == "上海"
    assert detail["product_name"] == order.activity.product.name


def test_the_pay_step_sends_a_shopper_without_an_address_to_the_form_and_back(pending):
    user, order = pending
    client = page_client(user)
    response = client.post(f"/orders/{order.order_no}/pay/")
    assert response.status_code == 302
    assert response["Location"] == f"/orders/address/?next=%2Forders%2F{order.order_no}%2F"
    assert not Payment.objects.exists()
    form = client.get(response["Location"])
    assert form.status_code == 200 and f'value="/orders/{order.order_no}/"'.encode() in form.content

    saved = client.post("/orders/address/", {**ADDRESS, "next": f"/orders/{order.order_no}/"})
    assert saved.status_code == 302 and saved["Location"] == f"/orders/{order.order_no}/"
    assert ShippingAddress.objects.get(user=user).recipient == ADDRESS["recipient"]
    to_provider = client.post(f"/orders/{order.order_no}/pay/")
    assert to_provider.status_code == 302 and to_provider["Location"].startswith("/payments/simulated/")


@pytest.mark.parametrize("next_url", ["https://evil.example/", "//evil.example/x", "javascript:alert(1)"])
def test_the_form_never_sends_the_shopper_off_the_site(next_url):
    client = page_client(UserFactory())
    saved = client.post("/orders/address/", {**ADDRESS, "next": next_url})
    assert saved.status_code == 302 and saved["Location"] == "/orders/"


HOSTILE = {
    "huge": ("line1", "长" * 100_000),
    "nul": ("recipient", "Zhang\x00San"),
    "bell": ("city", "Shang\x07hai"),
    "newline": ("recipient", "Zhang\nSan"),
    "right-to-left override": ("line1", "Road \u202e1 evil"),
    "letters in phone": ("phone", "call me maybe"),
    "too few digits": ("phone", "1234"),
    "mainland postal code": ("postal_code", "ABC123"),
    "no postal code": ("postal_code", ""),
    "unknown country": ("country", "XX"),
    "blank recipient": ("recipient", "   "),
}


@pytest.mark.parametrize("field, value", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_input_is_a_form_error_never_a_500(field, value):
    user = UserFactory()
    response = page_client(user).post("/orders/address/", {**ADDRESS, field: value})
    assert response.status_code == 400
    assert b'class="field-error"' in response.content
    assert not ShippingAddress.objects.filter(user=user).exists()


@pytest.mark.parametrize("field, value", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_input_is_a_400_json_never_a_500(field, value):
    user = UserFactory()
    response = api_of(user).put("/api/me/address", {**ADDRESS, field: value}, format="json")
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert body["code"] == "invalid_request" and field in body["errors"]
    assert not ShippingAddress.objects.filter(user=user).exists()


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b'"text"',
        b"{not json",
        json.dumps({**ADDRESS, "city": {"nested": 1}}).encode(),
        json.dumps({**ADDRESS, "phone": True}).encode(),
        json.dumps({**ADDRESS, "phone": None}).encode(),
        # A lone surrogate: valid JSON, not encodable text.
        json.dumps(ADDRESS)[:-1].encode() + b', "line2": "\\ud800"}',
        # …in a field whose error message would repeat it.
        json.dumps(ADDRESS)[:-1].encode() + b', "country": "\\ud800"}',
    ],
    ids=["list", "string", "broken", "nested", "boolean", "null", "surrogate", "surrogate country"],
)
def test_malformed_bodies_are_400_json(raw):
    user = UserFactory()
    response = api_of(user).put("/api/me/address", raw, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "invalid_request"


def test_addresses_in_and_outside_china_and_any_script_are_accepted():
    user = UserFactory()
    api = api_of(user)
    hong_kong = {**ADDRESS, "country": "HK", "postal_code": "", "city": "香港", "region": ""}
    assert api.put("/api/me/address", hong_kong, format="json").status_code == 200
    london = {
        "recipient": "Zoë O’Brien 👩‍💻",
        "phone": "+44 20 7946 0958",
        "country": "GB",
        "region": "",
        "city": "London",
        "line1": "221B Baker Street",
        "line2": "",
        "postal_code": "nw1 6xe",
    }
    saved = api.put("/api/me/address", london, format="json")
    assert saved.status_code == 200, saved.content
    assert saved.json()["postal_code"] == "NW1 6XE"
    assert ShippingAddress.objects.filter(user=user).count() == 1


def test_the_address_api_and_form_need_a_signed_in_shopper():
    assert APIClient().get("/api/me/address").status_code in (401, 403)
    assert APIClient().put("/api/me/address", ADDRESS, format="json").status_code in (401, 403)
    assert Client().get("/orders/address/").status_code == 302


def test_a_shopper_edits_their_address_in_the_form():
    user = UserFactory()
    give_address(user)
    client = page_client(user)
    form = client.get("/orders/address/")
    assert form.status_code == 200 and "浦东新区".encode() in form.content
    saved = client.post("/orders/address/", {**ADDRESS, "line2": "13 楼"})
    assert saved.status_code == 302
    assert ShippingAddress.objects.get(user=user).line2 == "13 楼"


# Any code point (lone surrogates included: JSON admits them as escapes, a form sends their
# WTF-8 bytes) and values far beyond any field's limit, in every field.
ANY_TEXT = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=40),
    st.sampled_from(["\ud800", "a\udc80b", "\x00", "=cmd|' /C calc'!A0", "<script>", "ＣＮ", "cn"]),
    st.integers(min_value=100, max_value=50_000).map(lambda n: "地" * n),
)
FIELDS = st.fixed_dictionaries({}, optional={name: ANY_TEXT for name in ShippingAddress.SNAPSHOT_FIELDS})
FUZZ = settings(
    max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def _form(fields: dict[str, str]) -> bytes:
    return "&".join(f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'))}" for k, v in fields.items()).encode()


def test_no_address_input_gets_a_server_error():
    user = UserFactory()
    client, api = page_client(user), api_of(user)

    @FUZZ
    @given(fields=FIELDS)
    def call(fields):
        page = client.generic(
            "POST", "/orders/address/", _form(fields), content_type="application/x-www-form-urlencoded"
        )
        assert page.status_code in (302, 400), page.status_code
        body = json.dumps(fields).encode()  # lone surrogates as \\ud800 escapes
        answer = api.generic("PUT", "/api/me/address", body, content_type="application/json")
        assert answer.status_code in (200, 400), (answer.status_code, answer.content[:300])
        if answer.status_code == 400:
            assert answer.json()["code"] == "invalid_request"

    call()


@pytest.mark.parametrize("next_url", ["/orders/\r\nX-Evil: 1", "/orders/\x00", "/" + "a" * 100_000, "/orders/\u202e"])
def test_a_hostile_next_is_never_a_500_nor_a_header(next_url):
    client = page_client(UserFactory())
    assert client.get("/orders/address/", {"next": next_url}).status_code == 200
    saved = client.post("/orders/address/", {**ADDRESS, "next": next_url})
    assert saved.status_code == 302 and "\n" not in saved["Location"] and "X-Evil" not in saved.headers
