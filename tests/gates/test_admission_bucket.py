"""The admission token bucket (stock/lua/admission.lua) on the real Redis, with threads."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import RequestFactory, override_settings

from core.client_address import client_ip
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import run_admission

from ..helpers import wait_until


def test_a_full_bucket_admits_its_burst_then_refuses_with_the_wait():
    keys = ActivityKeys(7)
    answers = [run_admission(stock_redis(), keys, rate=1, burst=5) for _ in range(8)]
    assert [admitted for admitted, _ in answers] == [True] * 5 + [False] * 3
    assert all(0 < wait_ms <= 1000 for admitted, wait_ms in answers if not admitted)
    # Refilled on Redis's clock: a token is back within a second.
    wait_until(lambda: run_admission(stock_redis(), keys, rate=1, burst=5)[0], timeout=10, what="a refill")


def test_200_concurrent_takers_never_get_more_than_the_bucket_holds():
    keys = ActivityKeys(8)

    def take(_):
        return run_admission(stock_redis(), keys, rate=1, burst=20)[0]

    with ThreadPoolExecutor(max_workers=50) as pool:
        admitted = sum(pool.map(take, range(200)))
    # 20 in the bucket, plus at most what one second of refill adds while they ran.
    assert 20 <= admitted <= 22


def test_bad_arguments_are_refused_by_the_script():
    import redis

    with pytest.raises(redis.ResponseError):
        run_admission(stock_redis(), ActivityKeys(9), rate=0, burst=5)


@pytest.mark.parametrize(
    ("header", "meta", "expected"),
    [
        ("", {"REMOTE_ADDR": "192.0.2.5", "HTTP_X_FORWARDED_FOR": "203.0.113.1"}, "192.0.2.5"),
        ("X-Forwarded-For", {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "1.1.1.1, 203.0.113.1"}, "203.0.113.1"),
        ("X-Forwarded-For", {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "garbage"}, "10.0.0.1"),
        ("X-Forwarded-For", {"REMOTE_ADDR": "10.0.0.1"}, "10.0.0.1"),
        ("X-Real-IP", {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_REAL_IP": "2001:db8::1"}, "2001:db8::1"),
    ],
)
def test_client_address_comes_from_the_socket_or_the_trusted_header_only(header, meta, expected):
    with override_settings(SECKILL_TRUSTED_PROXY_HEADER=header):
        assert client_ip(RequestFactory().get("/", **meta)) == expected
