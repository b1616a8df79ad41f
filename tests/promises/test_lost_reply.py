"""A purchase whose script ran in Redis but whose reply never came back (the link lost, or
the reply later than the client waits) has an outcome the web process does not know. Its
answer must not promise that nothing was taken (``busy``): the shopper's retry is then told
``duplicate``, truly, about a unit their first answer said they did not get (what
tests/promises/test_honest_answers.py caught in its Redis-outage sale, once in a few runs).

The loss is real: the web process's stock Redis sits behind a relay that lets the script
reach Redis and then cuts the link, or holds the reply past the client's socket timeout.
The two answers are judged as every history is, by the model of the shop."""

import math
import time

import pytest

from core.errors import ApiError
from seckill.purchase.reserve import purchase_reserve
from seckill.sale.snapshot import activity_snapshot
from stock.breaker import redis_breaker_reset
from stock.layout import StockLayout
from stock.redis_client import reset_stock_redis, stock_redis
from stock.scripts import ScriptCode
from tests.factories import make_activity, make_users
from tests.promises.linearizability import PURCHASE, Op, check_linearizable
from tests.promises.relay import RedisRelay

pytestmark = pytest.mark.django_db(transaction=True)

STOCK_SOCKET_TIMEOUT = 2.0  # stock.redis_client's socket_timeout: a reply later than this is lost to the client


def _purchase(activity, user) -> Op:
    """One purchase through the web process's own code, recorded as the sale tests record it."""
    sent = time.monotonic()
    try:
        purchase_reserve(activity=activity_snapshot(activity.pk), user_id=user.pk, quantity=1)
        status, code = 202, "queued"
    except ApiError as exc:
        status, code = exc.status, exc.code
    return Op(user.pk, PURCHASE, sent, time.monotonic(), status, code)


@pytest.mark.parametrize("loss", ["link-cut", "reply-late"])
def test_a_purchase_whose_reply_was_lost_does_not_say_nothing_was_taken(loss, settings):
    activity = make_activity(stock=10)
    before, shopper = make_users(2, prefix=f"lost-reply-{loss}-")
    assert _purchase(activity, before).status == 202  # the script is in Redis's cache: EVALSHA runs it
    redis_breaker_reset()

    real = settings.SECKILL_REDIS_URL
    relay = RedisRelay(real)
    settings.SECKILL_REDIS_URL = relay.url
    reset_stock_redis()
    try:
        if loss == "link-cut":
            relay.lose_reply_to(b"EVALSHA")
        else:
            relay.hold_reply_to(b"EVALSHA", STOCK_SOCKET_TIMEOUT + 1.0)
        first = _purchase(activity, shopper)
    finally:
        relay.close()
        settings.SECKILL_REDIS_URL = real
        reset_stock_redis()
        redis_breaker_reset()

    # The premise: the script ran, and the unit is the shopper's.
    again = StockLayout.of(activity.pk).reserve(stock_redis(), user_id=shopper.pk, quantity=1, limit=1)
    assert again.code == ScriptCode.DUPLICATE, f"the lost purchase did not reserve: {again}"
    assert first.status == 503 and first.code == "outcome_unknown", first.describe(first.send)

    retry = _purchase(activity, shopper)
    assert (retry.status, retry.code) == (409, "duplicate"), retry
    verdict = check_linearizable([first, retry], units=10, memory_bound=1.0, start=-math.inf, end=math.inf)
    assert verdict.ok, verdict
