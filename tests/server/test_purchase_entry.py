"""The purchase's one way into the sale (server.app.Shop.purchase): the refusals that are
the same for everyone from this process's memory on the event loop, every other token
purchase once on the thread pool, and each answer the one the API chain (Django's view)
gives the same request — status, code, detail and headers — also at the instant a sale
starts, ends or sells out."""

import json
from datetime import timedelta

import pytest
from django.test import RequestFactory
from django.utils import timezone

import server.app
from core.errors import ApiError
from orders.models import Order
from orders.services.lifecycle import order_cancel
from seckill.models import Activity
from seckill.purchase.gates import known_shopper, purchase_admit, purchase_early_refusal
from seckill.sale.activities import activity_token_ensure
from seckill.sale.replay import reservations_drain
from seckill.sale.snapshot import activity_snapshot, activity_snapshot_forget
from seckill.sale.soldout import sold_out_forget
from server.handlers import StackDispatcher
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users, token_of
from ..helpers import asgi_call, wsgi_call

pytestmark = pytest.mark.django_db(transaction=True)

# The headers both ways of answering must agree on (Date, Server, Content-Length and the
# request id are the connection's and the request's own).
COMPARED = ("content-type", "x-content-type-options", "referrer-policy", "cross-origin-opener-policy", "retry-after")


@pytest.fixture(scope="module")
def api_chain():
    """Django's view through the API chain: what the server's answers are compared with."""
    return StackDispatcher()


@pytest.fixture
def pool_runs(asgi_application, monkeypatch) -> list[int]:
    """The activity of every purchase the server runs on its thread pool."""
    runs: list[int] = []
    on_thread = server.app._purchase_on_thread

    def counted(request, activity_id):
        runs.append(activity_id)
        return on_thread(request, activity_id)

    monkeypatch.setattr(server.app, "_purchase_on_thread", counted)
    return runs


@pytest.fixture(autouse=True)
def remembering(settings):
    """Production's memories (the test settings keep none): the server answers from them."""
    settings.SECKILL_ACTIVITY_CACHE_TTL = 1
    settings.SECKILL_SOLD_OUT_TTL = 1


def _buy(app, activity_id: int, key: str | None, token: str, **body) -> dict:
    call = wsgi_call if isinstance(app, StackDispatcher) else asgi_call
    headers = {"Authorization": f"Token {key}"} if key else {}
    answer = call(
        app, "POST", f"/api/activities/{activity_id}/purchase", headers=headers, body={"token": token, **body}
    )
    answer["json"] = json.loads(answer["body"])
    return answer


def _same(served: dict, chain: dict) -> None:
    assert (served["status"], served["json"]) == (chain["status"], chain["json"])
    for name in COMPARED:
        assert served["headers"].get(name) == chain["headers"].get(name), name
    assert served["headers"]["x-request-id"] and chain["headers"]["x-request-id"]


def test_the_refusals_for_everyone_come_from_memory_and_match_the_api_chain(asgi_application, api_chain, pool_runs):
    now = timezone.now()
    upcoming = make_activity(stock=3, start_at=now + timedelta(hours=1), end_at=now + timedelta(hours=2))
    over = make_activity(stock=3, start_at=now - timedelta(hours=2), end_at=now - timedelta(hours=1))
    sold = make_activity(stock=1)
    token = activity_token_ensure(activity_id=sold.pk)
    buyer, key = make_users(2, prefix="early")
    assert _buy(asgi_application, sold.pk, token_of(buyer), token)["status"] == 202  # the last unit
    key = token_of(key)
    missing = sold.pk + 1000
    for activity_id, code in ((upcoming.pk, "not_started"), (over.pk, "ended"), (sold.pk, "sold_out")):
        activity_snapshot(activity_id)  # remembered, as after the flood's first request
        runs = len(pool_runs)
        served = _buy(asgi_application, activity_id, key, token)
        assert len(pool_runs) == runs, f"{code}: answered on the event loop"
        _same(served, _buy(api_chain, activity_id, key, token))
        assert served["json"]["code"] == code
    _buy(api_chain, missing, key, token)  # the absence remembered
    served = _buy(asgi_application, missing, None, token)  # no credentials: the same for everyone
    assert (served["status"], served["json"]["code"]) == (404, "not_found")


def test_what_memory_cannot_decide_runs_once_on_the_pool_and_answers_as_the_api_chain(
    asgi_application, api_chain, pool_runs
):
    activity = make_activity(stock=1, per_user_limit=1)
    token = activity_token_ensure(activity_id=activity.pk)
    buyer, other = (token_of(u) for u in make_users(2, prefix="pool"))
    bought = _buy(asgi_application, activity.pk, buyer, token)
    assert bought["status"] == 202 and pool_runs == [activity.pk]
    assert bought["headers"]["x-content-type-options"] == ["nosniff"]
    sold_out_forget(activity.pk)  # from here on, each answer is decided on the pool
    cases = [
        ("duplicate", buyer, {"token": token}),
        ("bad_token", other, {"token": "nope"}),
        ("invalid_request", other, {"token": token, "quantity": 2}),
        ("invalid_request", other, {"token": token, "coupon": 1}),
        ("authentication_failed", "not-a-key", {"token": token}),
    ]
    for code, key, body in cases:
        served = _buy(asgi_application, activity.pk, key, **body)
        sold_out_forget(activity.pk)
        _same(served, _buy(api_chain, activity.pk, key, **body))
        sold_out_forget(activity.pk)
        assert served["json"]["code"] == code, served
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 0  # the one buyer's unit, no more


def test_a_purchase_by_session_goes_to_django(asgi_application, pool_runs):
    activity = make_activity(stock=2)
    before = asgi_application.handed.calls
    answer = asgi_call(asgi_application, "POST", f"/api/activities/{activity.pk}/purchase", body={"token": "x"})
    assert answer["status"] == 401 and asgi_application.handed.calls == before + 1 and pool_runs == []


@pytest.mark.parametrize("moment", ["start", "end"])
def test_at_the_moment_a_sale_starts_or_ends_the_early_answer_is_the_full_checks(moment):
    """At the instant itself and a microsecond either side: the same rule decides both."""
    now = timezone.now()
    activity = make_activity(stock=3, start_at=now - timedelta(minutes=1), end_at=now + timedelta(minutes=1))
    instant = activity.start_at if moment == "start" else activity.end_at
    user = make_users(1, prefix=f"early{moment}")[0]
    request = RequestFactory().post(f"/api/activities/{activity.pk}/purchase", REMOTE_ADDR="127.0.0.1")
    token = activity_token_ensure(activity_id=activity.pk)
    snapshot = activity_snapshot(activity.pk)
    assert snapshot is not None
    for offset in (-1, 0, 1):
        at = instant + timedelta(microseconds=offset)
        early = purchase_early_refusal(activity.pk, now=at)
        try:
            purchase_admit(
                request,
                activity=snapshot,
                data={"token": token, "quantity": 1},
                now=at,
                identify=known_shopper(user.pk),
            )
            full = None
        except ApiError as exc:
            full = exc
        assert (early and (early.status, early.code, early.detail)) == (full and (full.status, full.code, full.detail))


def test_units_back_end_the_early_sold_out_within_the_memory(asgi_application, pool_runs):
    activity = make_activity(stock=1)
    token = activity_token_ensure(activity_id=activity.pk)
    first, second = (token_of(u) for u in make_users(2, prefix="back"))
    assert _buy(asgi_application, activity.pk, first, token)["status"] == 202
    assert _buy(asgi_application, activity.pk, second, token)["json"]["code"] == "sold_out"
    reservations_drain(activity_id=activity.pk)
    order_cancel(order=Order.objects.get(activity=activity), reason="shopper")
    sold_out_forget(activity.pk)  # the memory's end (tests/gates/test_memory_bounds.py times it)
    assert _buy(asgi_application, activity.pk, second, token)["status"] == 202


def test_the_server_logs_what_the_api_chain_logs(asgi_application, api_chain, caplog):
    """An invalid body is a 4xx worth a line either way; a sale not started is answered by
    the thousand and logged by neither."""
    now = timezone.now()
    upcoming = make_activity(stock=3, start_at=now + timedelta(hours=1), end_at=now + timedelta(hours=2))
    live = make_activity(stock=3)
    Activity.objects.filter(pk=live.pk).update(per_user_limit=1)
    activity_snapshot_forget(live.pk)
    token = activity_token_ensure(activity_id=live.pk)
    key = token_of(make_users(1, prefix="logged")[0])
    for app in (asgi_application, api_chain):
        caplog.clear()
        with caplog.at_level("WARNING", logger="django.request"):
            assert _buy(app, upcoming.pk, key, "x")["json"]["code"] == "not_started"
            assert _buy(app, live.pk, key, token, quantity="two")["status"] == 400
        logged = [getattr(r, "status_code", None) for r in caplog.records if r.name == "django.request"]
        assert logged == [400], app
