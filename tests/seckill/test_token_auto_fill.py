"""The automatic warm-up fills the shared token cache while a sale is near or live
(SECKILL_TOKEN_AUTO_FILL), once per half of SECKILL_TOKEN_SHARED_TTL: a sale's first
shoppers cost no database look-up even when nobody ran ``manage.py token_cache_fill``."""

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings
from django.utils import timezone
from django_redis import get_redis_connection
from rest_framework.exceptions import AuthenticationFailed

from seckill.purchase.authentication import token_cache_clear, token_shopper
from seckill.purchase.token_cache import (
    FILL_LOCK,
    FILLED_MARK,
    token_filter_params,
    token_shared_fill,
    token_shared_key,
)
from seckill.tasks import activities_autowarm_task

from ..factories import make_activity, make_users, token_of

pytestmark = pytest.mark.django_db(transaction=True)


def _shared(keys: list[str]) -> list[bool]:
    """Whether the shared cache holds each token's entry."""
    client = get_redis_connection("default")
    return [bool(client.exists(token_shared_key(key))) for key in keys]


def _shoppers(prefix: str) -> list[str]:
    """Three shoppers' tokens (made in bulk: no signal put them in the shared cache), the
    third one's user inactive."""
    users = make_users(3, prefix=prefix)
    get_user_model().objects.filter(pk=users[2].pk).update(is_active=False)
    return [token_of(user) for user in users]


def _sale_starting_in(seconds: float):
    now = timezone.now()
    start = now + timedelta(seconds=seconds)
    return make_activity(stock=5, warm=False, start_at=start, end_at=start + timedelta(hours=1))


def test_a_sale_about_to_start_fills_the_shared_token_cache_once_per_half_lifetime(django_assert_num_queries):
    keys = _shoppers("auto-fill")
    _sale_starting_in(60)  # within SECKILL_AUTO_WARMUP_LEAD (300 s)
    assert _shared(keys) == [False, False, False]

    activities_autowarm_task()
    assert _shared(keys) == [True, True, False]  # every active shopper's, no inactive one's
    assert token_filter_params()[0] > 0  # the filter rebuilt with them
    token_cache_clear()
    with django_assert_num_queries(0):
        assert token_shopper(keys[0]).username == "auto-fill0"

    # Filled moments ago: the next beat run leaves the cache as it is.
    client = get_redis_connection("default")
    client.delete(token_shared_key(keys[1]))
    activities_autowarm_task()
    assert _shared(keys) == [True, False, False]
    assert 0 < client.ttl(FILLED_MARK) <= 3 * 3600  # half of SECKILL_TOKEN_SHARED_TTL (6 h)

    # A cache Redis that lost its contents (a restart) lost the mark with them: filled again.
    client.delete(FILLED_MARK, token_shared_key(keys[0]))
    activities_autowarm_task()
    assert _shared(keys) == [True, True, False]


def test_a_live_sale_fills_it_too_and_an_operators_fill_counts():
    keys = _shoppers("auto-fill-live")
    make_activity(stock=5)  # started, warmed
    call_command("token_cache_fill", stdout=StringIO(), stderr=StringIO())
    client = get_redis_connection("default")
    client.delete(token_shared_key(keys[0]))
    activities_autowarm_task()
    assert _shared(keys) == [False, True, False]  # the operator filled it moments ago

    client.delete(FILLED_MARK)
    activities_autowarm_task()
    assert _shared(keys) == [True, True, False]


def test_no_fill_without_a_sale_near_or_when_turned_off():
    keys = _shoppers("auto-fill-off")
    _sale_starting_in(3600)  # beyond the warm-up lead
    activities_autowarm_task()
    assert _shared(keys) == [False, False, False]

    _sale_starting_in(60)
    with override_settings(SECKILL_TOKEN_AUTO_FILL=False):
        activities_autowarm_task()
    assert _shared(keys) == [False, False, False]
    assert not get_redis_connection("default").exists(FILLED_MARK)


def test_a_fill_while_another_runs_is_refused_and_every_token_stays_in_the_filter():
    """Two fills at once (the operator's command as beat's starts), in two threads: the
    second begins after the first's first chunk, and the first ends after the second's
    first chunk. Without the lock the second began the next filter afresh under the first
    and then died on a filter the first had already put in place (`RENAME … no such key`);
    had the first ended before the second's first chunk, the filter it put in place would
    have lacked its own first chunk's tokens: real shoppers refused as made-up."""
    keys = [token_of(user) for user in make_users(6, prefix="fill-race")]
    second_began, second_chunked, first_ended = threading.Event(), threading.Event(), threading.Event()
    outcome: dict[str, str] = {}

    def first_chunk_then_wait(done: int) -> None:
        if not second_began.is_set():
            second_began.set()
            assert second_chunked.wait(30), "the second fill did not get on"

    def second_chunk_then_wait(done: int) -> None:
        if not second_chunked.is_set():
            second_chunked.set()
            assert first_ended.wait(30), "the first fill did not end"

    def run(name: str, progress, after: threading.Event | None, done: threading.Event) -> None:
        try:
            if after is not None:
                assert after.wait(30), "the first fill did not start"
            token_shared_fill(progress=progress, chunk=2)
            outcome[name] = "filled"
        except Exception as exc:
            outcome[name] = type(exc).__name__
        finally:
            done.set()
            connections.close_all()

    threads = [
        threading.Thread(target=run, args=("first", first_chunk_then_wait, None, first_ended)),
        threading.Thread(target=run, args=("second", second_chunk_then_wait, second_began, second_chunked)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Entries gone, the filter left: each token is judged by the filter, then the database.
    get_redis_connection("default").delete(*[token_shared_key(key) for key in keys])
    token_cache_clear()
    accepted = []
    for key in keys:
        try:
            accepted.append(token_shopper(key).username)
        except AuthenticationFailed:
            accepted.append(None)
    assert accepted == [f"fill-race{i}" for i in range(6)], outcome
    assert outcome == {"first": "filled", "second": "TokenFillRunning"}
    with pytest.raises(CommandError, match="another token fill is running"):
        with get_redis_connection("default").lock(FILL_LOCK, timeout=60):
            call_command("token_cache_fill", stdout=StringIO(), stderr=StringIO())
    get_redis_connection("default").delete(FILLED_MARK)  # due, but one is running:
    with get_redis_connection("default").lock(FILL_LOCK, timeout=60):
        _sale_starting_in(60)
        activities_autowarm_task()  # beat's fill leaves it to the running one, no error
    assert not get_redis_connection("default").exists(FILLED_MARK)
