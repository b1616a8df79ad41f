"""The automatic warm-up fills the shared token cache while a sale is near or live
(SECKILL_TOKEN_AUTO_FILL), once per half of SECKILL_TOKEN_SHARED_TTL: a sale's first
shoppers cost no database look-up even when nobody ran ``manage.py token_cache_fill``."""

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone
from django_redis import get_redis_connection

from seckill.authentication import FILLED_MARK, token_cache_clear, token_filter_params, token_shared_key, token_shopper
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
