"""Schema-driven fuzzing (schemathesis, on hypothesis) of every operation in /api/schema/:
valid and invalid inputs, with and without credentials, against the real PostgreSQL and
Redis through the WSGI application; then hypothesis alone on the forms and the payment
URLs the schema does not describe. No input may get a 500."""

import json
from urllib.parse import quote

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error

from seckill.models import Activity
from seckill.sale.activities import activity_token_ensure
from seckill.sale.snapshot import activity_snapshot_forget

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES_PER_OPERATION_AND_MODE = 25


def _operations():
    from config.wsgi import application

    schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
    return [result.ok() for result in schema.get_all_operations()]


def test_no_input_to_any_operation_gets_a_server_error():
    activity = make_activity(stock=1000, per_user_limit=3)
    Activity.objects.filter(pk=activity.pk).update(captcha_required=True)
    activity_snapshot_forget(activity.pk)
    (user,) = make_users(1)
    token, key = activity_token_ensure(activity_id=activity.pk), token_of(user)

    operations = _operations()
    paths = {op.path for op in operations}
    assert {
        "/api/activities/{activity_id}/purchase",
        "/api/orders/{order_no}/cancel",
        "/api/activities/{activity_id}/captcha",
        "/api/me",
    } <= paths

    calls = 0
    for operation in operations:
        for mode in schemathesis.GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES_PER_OPERATION_AND_MODE,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            def call(case):
                nonlocal calls
                # Half the generated activity ids point at the real activity and half the
                # bodies carry its real token, so the deeper gates see traffic too; the calls
                # take turns: a valid API token, none, a token that is none.
                params = case.path_parameters or {}
                if isinstance(params.get("activity_id"), int) and params["activity_id"] % 2 == 0:
                    params["activity_id"] = activity.pk
                if isinstance(case.body, dict) and len(case.body) % 2 == 0 and "token" in case.body:
                    case.body["token"] = token
                calls += 1
                headers = [{"Authorization": f"Token {key}"}, {}, {"Authorization": "Token not-a-key"}][calls % 3]
                case.call_and_validate(headers=headers, checks=[not_a_server_error])

            try:
                call()
            except Unsatisfiable:
                # An operation without parameters or body has no invalid input to make.
                assert mode == schemathesis.GenerationMode.NEGATIVE, operation.path
    assert calls >= len(operations) * 10
    print(f"fuzzed {len(operations)} operations with {calls} calls")


# --- the endpoints and forms outside the schema -------------------------------------------

# Any code point, lone surrogates included (JSON admits them as escapes, a form sends their
# WTF-8 bytes), and values far beyond any field's limit.
ANY_TEXT = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=40),
    st.sampled_from(["\ud800", "\udfff", "a\udc80b", "\x00", "%", "../", "' OR 1=1 --", "<script>"]),
    st.integers(min_value=1_000, max_value=200_000).map(lambda n: "x" * n),
)
FUZZ = settings(
    max_examples=50, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def _form(fields: dict[str, str]) -> bytes:
    """An urlencoded body as a client would send it: each value's UTF-8 bytes (a lone
    surrogate as the three bytes it would have), percent-encoded."""
    return "&".join(
        f"{quote(k.encode('utf-8', 'surrogatepass'))}={quote(v.encode('utf-8', 'surrogatepass'))}"
        for k, v in fields.items()
    ).encode()


def _segment(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")[:2000] or "x"


def _no_server_error(response, what: str) -> None:
    assert response.status_code < 500, (what, response.status_code, response.content[:300])


def _post_form(client, path: str, fields: dict[str, str]):
    response = client.generic("POST", path, _form(fields), content_type="application/x-www-form-urlencoded")
    _no_server_error(response, path)


FORMS = {
    "/accounts/signup/": ("username", "email", "password1", "password2"),
    "/accounts/login/": ("username", "password"),
    "/accounts/password_reset/": ("email",),
    "/i18n/setlang/": ("language", "next"),
}


@pytest.mark.parametrize("path", sorted(FORMS))
def test_no_input_to_a_form_gets_a_server_error(path):
    from django.test import Client

    get_user_model().objects.create_user("fuzzed", email="fuzzed@example.com", password="pw-fuzz-1234")
    names = FORMS[path]

    @given(values=st.lists(ANY_TEXT, min_size=len(names), max_size=len(names)), extra=ANY_TEXT, query=ANY_TEXT)
    @FUZZ
    def post(values, extra, query):
        client = Client(raise_request_exception=False)
        fields = dict(zip(names, values, strict=True))
        _post_form(client, path, fields)
        _post_form(client, f"{path}?next={_segment(query)}", {**fields, extra[:50]: extra})
        _no_server_error(client.get(f"{path}?{_form({'next': query, 'email': extra}).decode()}"), path)

    post()


def test_no_input_to_the_payment_endpoints_gets_a_server_error():
    """The providers' notification URLs and the simulated provider's checkout page, with
    any token in the path and any body (form or JSON), signed or not."""
    from django.test import Client

    @given(
        token=ANY_TEXT,
        fields=st.dictionaries(ANY_TEXT.map(lambda v: v[:40]), ANY_TEXT, max_size=4),
        as_json=st.booleans(),
        signature=ANY_TEXT,
    )
    @settings(FUZZ, max_examples=30)
    @example(token="\x00", fields={}, as_json=False, signature="")
    def call(token, fields, as_json, signature):
        client = Client(raise_request_exception=False)
        headers = {"HTTP_X_SIGNATURE": signature.encode("utf-8", "surrogatepass").decode("latin-1")[:500]}
        for path in (f"/payments/process/{_segment(token)}/", f"/payments/simulated/{_segment(token)}/"):
            if as_json:
                body = json.dumps(fields).encode()
                response = client.generic("POST", path, body, content_type="application/json", **headers)
            else:
                response = client.generic(
                    "POST", path, _form(fields), content_type="application/x-www-form-urlencoded", **headers
                )
            _no_server_error(response, path)
            _no_server_error(client.get(path, **headers), path)

    call()
