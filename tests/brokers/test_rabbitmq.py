"""RabbitMQ as the broker: the concurrency invariants through real gunicorn and a real
Celery worker publishing to and consuming from the RabbitMQ on this machine.

Each test gets its own queue (``rabbit_env`` in tests/conftest.py); the cluster with
S = 8 on RabbitMQ is in tests/cluster/test_cluster_concurrency.py."""

import json
import urllib.request

import pytest

from ..factories import make_activity, make_users
from ..helpers import start_celery_worker, start_gunicorn
from ..seckill.test_purchase_concurrency import _assert_settled, _hammer, _sell_100_units_to_1000_shoppers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def rabbit_stack(rabbit_env, process_logs):
    worker = start_celery_worker(process_logs, env=rabbit_env)
    web, base = start_gunicorn(process_logs, workers=2, threads=8, env=rabbit_env)
    assert "transport:   amqp://guest" in worker.log(), worker.log()[-2000:]
    yield base, rabbit_env["CELERY_TASK_DEFAULT_QUEUE"]
    web.stop()
    worker.stop()


def test_1000_shoppers_100_units_with_rabbitmq(rabbit_stack):
    base, queue = rabbit_stack
    _sell_100_units_to_1000_shoppers(base)

    with urllib.request.urlopen(f"{base}/healthz", timeout=30) as response:
        assert json.loads(response.read())["broker"]["status"] == "ok"
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as response:
        assert f'seckill_queue_depth{{queue="{queue}"}} 0.0' in response.read().decode()


def test_mixed_quantities_with_rabbitmq(rabbit_stack):
    import random

    base, _ = rabbit_stack
    activity = make_activity(stock=100, per_user_limit=3)
    users = make_users(300)
    rng = random.Random(7)
    statuses = _hammer(base, activity, users, [rng.randint(1, 3) for _ in users])
    assert set(statuses) <= {202, 410}, sorted(set(statuses))
    _assert_settled(activity, 100)
