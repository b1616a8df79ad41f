"""The server's front (config/front.py) answers the refusals that are the same for every
caller before Django builds a request. Each early answer must be the answer the full
path gives the same request: the front and the app behind it are called side by side with
a valid, token-authenticated purchase, and compared — status, code, detail and headers —
in every case, also at the moment a sale starts, ends or sells out."""

import json
from datetime import timedelta

import pytest
from django.test import RequestFactory
from django.utils import timezone

import core.memory
from config.asgi import application as front
from config.front import MAX_MEMO
from core.errors import ApiError
from orders.models import Order
from orders.services import order_cancel
from seckill.activities import activity_token_ensure
from seckill.gates import known_shopper, purchase_admit, purchase_early_refusal, purchase_remembered_refusal
from seckill.limited import limited_remember
from seckill.models import Activity
from seckill.replay import reservations_drain
from seckill.selectors import activity_snapshot, activity_snapshot_forget
from seckill.soldout import sold_out_forget
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users, token_of
from ..helpers import asgi_call, gate_window_room

pytestmark = pytest.mark.django_db(transaction=True)

full_path = front.app  # what the front hands every request it does not answer


class Handed:
    """Counts what the front hands on to the full path."""

    def __init__(self, app):
        self.app, self.calls = app, 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        return await self.app(scope, receive, send)


@pytest.fixture(autouse=True)
def handed():
    counter = front.app = Handed(full_path)
    yield counter
    front.app = full_path


COMPARED = ("content-type", "x-content-type-options", "referrer-policy", "cross-origin-opener-policy", "retry-after")


@pytest.fixture(autouse=True)
def remembering(settings):
    """The production memories (the test settings keep none): the front answers from them."""
    settings.SECKILL_ACTIVITY_CACHE_TTL = 30
    settings.SECKILL_SOLD_OUT_TTL = 30
    settings.SECKILL_DUPLICATE_TTL = 30


def _buy(app, activity_id: int, key: str, token: str) -> dict:
    answer = asgi_call(
        app,
        "POST",
        f"/api/activities/{activity_id}/purchase",
        headers={"Authorization": f"Token {key}"},
        body={"token": token, "quantity": 1},
    )
    answer["json"] = json.loads(answer["body"])
    return answer


def _same(early: dict, full: dict) -> None:
    assert early["status"] == full["status"]
    assert early["json"] == full["json"]
    for name in COMPARED:
        assert early["headers"].get(name) == full["headers"].get(name), name
    assert early["headers"]["x-request-id"] and full["headers"]["x-request-id"]


def _early_then_full(activity_id: int, key: str, token: str) -> tuple[dict, dict]:
    """The front's answer, which must have come from its memory, and the full path's."""
    assert purchase_early_refusal(activity_id) is not None, "the front should know this answer"
    before = front.app.calls
    early = _buy(front, activity_id, key, token)
    assert front.app.calls == before, "answered at the front"
    return early, _buy(full_path, activity_id, key, token)


def _remembered_then_full(activity_id: int, key: str, body: dict) -> tuple[dict, dict]:
    """The front's answer to a shopper it knows, decided by its memory alone, and the full path's."""
    request = RequestFactory().post("/", REMOTE_ADDR="127.0.0.1")
    refusal = purchase_remembered_refusal(request, activity_id=activity_id, token=key, data=body)
    assert refusal is not None, "the front should know this answer"
    before = front.app.calls
    early = asgi_call(
        front, "POST", f"/api/activities/{activity_id}/purchase", headers={"Authorization": f"Token {key}"}, body=body
    )
    assert front.app.calls == before, "answered at the front"
    full = asgi_call(
        full_path,
        "POST",
        f"/api/activities/{activity_id}/purchase",
        headers={"Authorization": f"Token {key}"},
        body=body,
    )
    for answer in (early, full):
        answer["json"] = json.loads(answer["body"])
    return early, full


def test_an_unknown_activity_is_refused_early_as_the_full_path_refuses_it():
    activity = make_activity(stock=3)
    key = token_of(make_users(1, prefix="early404")[0])
    for missing in (activity.pk + 1, activity.pk + 10_000, 0, 2**63):
        _buy(full_path, missing, key, "x")  # the full path remembers the absence (or the highest id)
        if missing < 2**63:
            early, full = _early_then_full(missing, key, "x")
            _same(early, full)
            assert early["json"]["code"] == "not_found"


def test_a_sale_not_started_and_one_ended_are_refused_early_as_the_full_path_refuses_them():
    now = timezone.now()
    upcoming = make_activity(stock=3, start_at=now + timedelta(hours=1), end_at=now + timedelta(hours=2))
    over = make_activity(stock=3, start_at=now - timedelta(hours=2), end_at=now - timedelta(hours=1))
    closed = make_activity(stock=3)
    Activity.objects.filter(pk=closed.pk).update(status=Activity.Status.ENDED)
    activity_snapshot_forget(closed.pk)  # as the admin's save and the close task do
    key = token_of(make_users(1, prefix="earlywin")[0])
    for activity, code in ((upcoming, "not_started"), (over, "ended"), (closed, "ended")):
        activity_snapshot(activity.pk)  # remembered, as after the flood's first request
        early, full = _early_then_full(activity.pk, key, "whatever")
        _same(early, full)
        assert early["json"]["code"] == code


def test_a_sale_that_sells_out_is_refused_early_from_then_on_and_not_once_units_come_back():
    activity = make_activity(stock=2, db_reserve=0)
    token = activity_token_ensure(activity_id=activity.pk)
    users = make_users(5, prefix="earlysold")
    keys = [token_of(u) for u in users]
    assert _buy(front, activity.pk, keys[0], token)["status"] == 202
    assert purchase_early_refusal(activity.pk) is None  # one unit left
    assert _buy(front, activity.pk, keys[1], token)["status"] == 202  # the last: Redis says none is left
    early, full = _early_then_full(activity.pk, keys[2], token)
    _same(early, full)
    assert early["json"]["code"] == "sold_out"
    early, full = _early_then_full(activity.pk, keys[3], token)
    _same(early, full)
    assert early["json"]["code"] == "sold_out"

    # A unit comes back. Once the memory has run out (tests/gates/test_sold_out_memory.py
    # times it; here it is dropped as its expiry would), the front no longer answers and
    # the next shopper gets the unit.
    reservations_drain(activity_id=activity.pk)  # the orders, as the drain task makes them
    order_cancel(order=Order.objects.filter(activity=activity).first(), reason="user")
    assert _buy(full_path, activity.pk, keys[3], token)["json"]["code"] == "sold_out"  # still remembered
    sold_out_forget(activity.pk)
    assert purchase_early_refusal(activity.pk) is None
    assert _buy(front, activity.pk, keys[4], token)["status"] == 202


@pytest.mark.parametrize("moment", ["start", "end"])
def test_at_the_moment_a_sale_starts_or_ends_the_early_answer_is_the_full_paths(moment):
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
    codes = [
        getattr(purchase_early_refusal(activity.pk, now=instant + timedelta(microseconds=o)), "code", None)
        for o in (-1, 0, 1)
    ]
    assert codes == {"start": ["not_started", None, None], "end": [None, "ended", "ended"]}[moment]


def test_what_the_front_does_not_know_goes_to_the_full_path(settings):
    """Nothing remembered (a cold process, or memories off): no early answer at all, and
    a request the full path must see first — a Host that is not allowed — is never
    answered early."""
    activity = make_activity(stock=3)
    key = token_of(make_users(1, prefix="earlycold")[0])
    settings.SECKILL_ACTIVITY_CACHE_TTL = 0
    core.memory.forget_all()
    assert purchase_early_refusal(activity.pk + 5) is None
    before = front.app.calls
    assert _buy(front, activity.pk + 5, key, "x")["json"]["code"] == "not_found"
    assert front.app.calls == before + 1  # from the full path
    settings.SECKILL_ACTIVITY_CACHE_TTL = 30
    _buy(full_path, activity.pk + 5, key, "x")
    bad_host = asgi_call(
        front,
        "POST",
        f"/api/activities/{activity.pk + 5}/purchase",
        headers={"Authorization": f"Token {key}", "Host": "evil.example"},
        body={"token": "x"},
    )
    assert bad_host["status"] == 400  # Django's DisallowedHost, as without the front
    assert front.app.calls == before + 2


def test_the_fronts_memos_follow_the_settings_and_stay_bounded(settings, handed):
    """The front remembers its verdict on each Host and the body of each refusal (the same
    request after request): a changed ALLOWED_HOSTS is obeyed at once, and a flood of
    made-up Host headers does not grow what it remembers."""
    activity = make_activity(stock=3)
    key = token_of(make_users(1, prefix="earlymemo")[0])
    path = f"/api/activities/{activity.pk + 5}/purchase"

    def buy(**headers) -> dict:
        return asgi_call(front, "POST", path, headers={"Authorization": f"Token {key}", **headers}, body={})

    settings.ALLOWED_HOSTS = ["testserver"]  # the host asgi_call sends
    assert buy()["status"] == 404
    before = handed.calls
    assert json.loads(buy()["body"])["code"] == "not_found"
    assert handed.calls == before, "answered at the front"
    settings.ALLOWED_HOSTS = ["shop.example"]
    assert buy()["status"] == 400  # Django's DisallowedHost, as without the front
    assert handed.calls == before + 1
    for n in range(MAX_MEMO * 3):  # a second Host header: a new value each time
        assert buy(Host=f"h{n}.evil.example")["status"] == 400
    assert len(front.hosts) <= MAX_MEMO
    for n in range(MAX_MEMO * 3):
        front.refusal_body(ApiError(400, "invalid_request", f"made-up text {n}"))
    assert len(front.refusal_bodies) <= MAX_MEMO
    assert json.loads(front.refusal_body(ApiError(410, "sold_out", "Sold out."))) == {
        "code": "sold_out",
        "detail": "Sold out.",
    }


def test_a_shopper_the_process_knows_is_refused_at_the_front_as_the_full_path_refuses_them(settings):
    """Taken part (409, remembered after the stock script said so), a bad token, an invalid
    body and over the limit (429, remembered until the window ends): a shopper whose token
    this process remembers gets each from the front's memory, as from the full path."""
    activity = make_activity(stock=10)
    # An hour's window with room left (gate_window_room): a minute's now and then ended
    # mid-test, and the count started again.
    Activity.objects.filter(pk=activity.pk).update(rate_per_user="2/h")
    activity_snapshot_forget(activity.pk)
    token = activity_token_ensure(activity_id=activity.pk)
    winner, other, hammering = (token_of(u) for u in make_users(3, prefix="remembered"))
    assert _buy(front, activity.pk, winner, token)["status"] == 202  # the full path: the process meets them
    early, full = _remembered_then_full(activity.pk, winner, {"token": token})
    _same(early, full)
    assert early["json"]["code"] == "duplicate"

    assert _buy(front, activity.pk, other, "wrong")["json"]["code"] == "bad_token"  # known from now on
    early, full = _remembered_then_full(activity.pk, other, {"token": "wrong"})
    _same(early, full)
    assert early["json"]["code"] == "bad_token"
    early, full = _remembered_then_full(activity.pk, other, {"token": token, "quantity": 0})
    _same(early, full)
    assert early["json"]["code"] == "invalid_request"

    # Without the duplicate memory every retry is counted: two a minute, then 429 from
    # Redis's count, remembered until the window ends.
    settings.SECKILL_DUPLICATE_TTL = 0
    gate_window_room(3600)
    assert _buy(front, activity.pk, hammering, token)["status"] == 202
    assert _buy(front, activity.pk, hammering, token)["json"]["code"] == "duplicate"
    assert _buy(front, activity.pk, hammering, token)["json"]["code"] == "rate_limited"
    early, full = _remembered_then_full(activity.pk, hammering, {"token": token})
    _same(early, full)
    assert early["json"]["code"] == "rate_limited"
    assert early["headers"]["retry-after"]


def test_what_the_memory_cannot_decide_reaches_the_stock_script_exactly_once():
    """A known shopper with nothing remembered against them: the front hands the purchase,
    body and all, to the full path, which reserves once."""
    activity = make_activity(stock=3)
    token = activity_token_ensure(activity_id=activity.pk)
    key = token_of(make_users(1, prefix="handed")[0])
    _buy(front, activity.pk, key, "wrong")  # the process meets the shopper
    request = RequestFactory().post("/", REMOTE_ADDR="127.0.0.1")
    assert purchase_remembered_refusal(request, activity_id=activity.pk, token=key, data={"token": token}) is None
    answer = _buy(front, activity.pk, key, token)
    assert answer["status"] == 202
    assert int(stock_redis().get(ActivityKeys(activity.pk).stock)) == 2


def test_a_request_without_credentials_for_an_unknown_or_closed_sale_gets_the_early_answer_not_401():
    """The front looks up an activity it does not remember (on the thread pool, once per
    the memory's lifetime), so even the first request — without credentials, with no
    body — gets the answer that is the same for everyone; the full path says 401 first."""
    activity = make_activity(stock=3)
    now = timezone.now()
    over = make_activity(stock=3, start_at=now - timedelta(hours=2), end_at=now - timedelta(hours=1))
    core.memory.forget_all()
    for activity_id, code in ((activity.pk + 50, "not_found"), (over.pk, "ended")):
        before = front.app.calls
        early = asgi_call(front, "POST", f"/api/activities/{activity_id}/purchase")
        assert front.app.calls == before, "answered at the front"
        assert (early["status"], json.loads(early["body"])["code"]) in ((404, code), (403, code))
        full = asgi_call(full_path, "POST", f"/api/activities/{activity_id}/purchase")
        assert full["status"] == 401


def test_a_sale_whose_admission_cap_is_full_is_refused_at_the_front_as_by_the_full_path():
    """No per-shopper or per-address limit, an admission cap of one a second: once Redis's
    bucket said "empty", the process remembers it until the next token is due."""
    activity = make_activity(stock=10)
    Activity.objects.filter(pk=activity.pk).update(
        rate_per_user="off", rate_per_ip="off", admission_rate=1, admission_burst=1
    )
    activity_snapshot_forget(activity.pk)
    token = activity_token_ensure(activity_id=activity.pk)
    first, second, third = (token_of(u) for u in make_users(3, prefix="capped"))
    assert _buy(front, activity.pk, first, token)["status"] == 202
    assert _buy(front, activity.pk, second, token)["json"]["code"] == "rate_limited"  # from Redis's bucket
    # The bucket's next token is due within a second; a busy machine may take longer than
    # that for what follows, so the verdict is remembered for a minute, as a slower cap's would be.
    limited_remember(f"admission:{activity.pk}", 60)
    _buy(full_path, activity.pk, third, "wrong")  # the process meets the third shopper
    early, full = _remembered_then_full(activity.pk, third, {"token": token})
    _same(early, full)
    assert early["json"]["code"] == "rate_limited"


def test_the_front_logs_what_the_full_path_logs(caplog):
    """An invalid body is a 4xx worth a line either way; a sale not started is answered by the
    thousand and logged by neither."""
    now = timezone.now()
    upcoming = make_activity(stock=3, start_at=now + timedelta(hours=1), end_at=now + timedelta(hours=2))
    live = make_activity(stock=3)
    token = activity_token_ensure(activity_id=live.pk)
    key = token_of(make_users(1, prefix="logged")[0])
    for app in (front, full_path):
        caplog.clear()
        with caplog.at_level("WARNING", logger="django.request"):
            assert _buy(app, upcoming.pk, key, "x")["json"]["code"] == "not_started"
            answer = asgi_call(
                app,
                "POST",
                f"/api/activities/{live.pk}/purchase",
                headers={"Authorization": f"Token {key}"},
                body={"token": token, "quantity": "two"},
            )
            assert answer["status"] == 400
        logged = [getattr(r, "status_code", None) for r in caplog.records if r.name == "django.request"]
        assert logged == [400], app
