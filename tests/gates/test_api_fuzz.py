"""Schema-driven fuzzing (schemathesis, on hypothesis) of every operation in /api/schema/:
valid and invalid inputs, with and without credentials, against the real PostgreSQL and
Redis through the WSGI application. No input may get a 500."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error

from seckill.activities import activity_token_ensure
from seckill.models import Activity
from seckill.selectors import activity_snapshot_forget

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES_PER_OPERATION_AND_MODE = 40


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
                # bodies carry its real token, so the deeper gates see traffic too; every
                # third call goes without credentials.
                params = case.path_parameters or {}
                if isinstance(params.get("activity_id"), int) and params["activity_id"] % 2 == 0:
                    params["activity_id"] = activity.pk
                if isinstance(case.body, dict) and len(case.body) % 2 == 0 and "token" in case.body:
                    case.body["token"] = token
                calls += 1
                headers = {"Authorization": f"Token {key}"} if calls % 3 else {}
                case.call_and_validate(headers=headers, checks=[not_a_server_error])

            try:
                call()
            except Unsatisfiable:
                # An operation without parameters or body has no invalid input to make.
                assert mode == schemathesis.GenerationMode.NEGATIVE, operation.path
    assert calls >= len(operations) * 10
    print(f"fuzzed {len(operations)} operations with {calls} calls")
