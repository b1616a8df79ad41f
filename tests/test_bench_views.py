"""The bench's database-direct purchase (bench/views.py): the contrast `make bench`
measures must be a working purchase, or its figures mean nothing."""

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from inventory.models import SeckillStock
from orders.models import Order
from seckill.activities import activity_token_ensure
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from .factories import make_activity, make_users, token_of

pytestmark = [pytest.mark.django_db(transaction=True)]


@override_settings(ROOT_URLCONF="tests.bench_urls")
def test_database_direct_purchase_sells_the_stock_once_without_redis():
    activity = make_activity(stock=3, warm=False)
    users = make_users(5, prefix="naive")
    token = activity_token_ensure(activity_id=activity.pk)
    url = f"/api/bench/activities/{activity.pk}/purchase-db"

    def buy(user):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
        return client.post(url, {"token": token}, format="json")

    answers = [buy(user) for user in users]
    assert [a.status_code for a in answers] == [202, 202, 202, 410, 410]
    assert all(a.json()["code"] == "ordered" for a in answers[:3])
    assert buy(users[0]).json()["code"] == "duplicate"
    assert Order.objects.filter(activity=activity).count() == 3
    assert SeckillStock.objects.get(activity=activity).available == 0
    assert stock_redis().get(ActivityKeys(activity.pk).stock) is None  # never warmed, never touched


def test_the_bench_tells_a_lopsided_run_from_a_balanced_one():
    """The keep-alive imbalance: one gunicorn process did most of the work (bench/wrkrun.py)."""
    from bench.wrkrun import WrkResult

    def run(by_pid):
        return WrkResult(1000, 10.0, {}, {}, {}, 0.1, extra={"wall": 10.0, "server_cpu_by_pid": by_pid})

    assert run([8.5, 8.2, 0.1]).lopsided == ""  # both workers busy, the master idle
    assert run([9.0, 2.0, 0.1]).lopsided == "gunicorn processes at 0.90 and 0.20 cores"
    assert run([3.0, 0.5]).lopsided == ""  # a light run: under half a core, nothing to tell
    assert run([]).lopsided == ""
