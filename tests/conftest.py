"""Fixtures shared by the whole suite: real PostgreSQL and Redis (embedded unless the
environment names them), a clean pair of Redis databases per test, real processes."""

import os
import uuid

import pytest
import redis
from django.conf import settings
from django.db import connection

import core.memory
from stock.redis_client import reset_stock_redis, stock_redis

from .helpers import start_celery_worker, start_gunicorn, subprocess_env


def pytest_unconfigure(config):
    """Delete this run's own RabbitMQ queue (devtools.pytest_plugin stops the embedded servers)."""
    if settings.CELERY_BROKER_URL.startswith("amqp"):
        _amqp_queue(delete=True)


def _amqp_queue(*, delete: bool) -> None:
    """RabbitMQ: empty this run's own queue before each test; delete it at the end."""
    from kombu import Exchange, Queue

    from config.celery_app import app

    name = settings.CELERY_TASK_DEFAULT_QUEUE
    with app.connection_for_write() as conn:
        channel = conn.channel()
        queue = Queue(name, Exchange(name), name, channel=channel)
        queue.declare()
        if delete:
            queue.delete()
            queue.exchange.delete()
        else:
            queue.purge()
        channel.close()


@pytest.fixture(autouse=True)
def clean_redis():
    """Each test starts with empty Redis databases (stock/cache and broker) and empty
    in-process caches and singletons (every core.memory memory and registered reset)."""
    core.memory.forget_all()
    stock_redis().flushdb()
    if settings.CELERY_BROKER_URL.startswith("redis"):
        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    elif settings.CELERY_BROKER_URL.startswith("amqp"):
        _amqp_queue(delete=False)
    yield
    core.memory.forget_all()


@pytest.fixture(autouse=True)
def no_redis_inside_transactions(request, monkeypatch):
    """Fail any Redis call made while the code holds a database transaction open: the
    purchase path must never hold a transaction while it talks to Redis (Sentry's rule).
    The test's own wrapping transaction (for non-transactional tests) is the baseline."""
    baseline = len(connection.atomic_blocks)
    original = redis.Redis.execute_command

    def guarded(self, *args, **kwargs):
        if len(connection.atomic_blocks) > baseline:
            raise AssertionError(f"Redis command {args[0]!r} issued inside a database transaction")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "execute_command", guarded)
    # A pipeline sends its commands without Redis.execute_command: guard it as well.
    original_execute = redis.client.Pipeline.execute

    def guarded_execute(self, *args, **kwargs):
        if len(connection.atomic_blocks) > baseline:
            raise AssertionError("Redis pipeline executed inside a database transaction")
        return original_execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", guarded_execute)
    yield


@pytest.fixture
def process_logs(tmp_path):
    return tmp_path


RABBITMQ_URL = os.environ.get("SECKILL_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


@pytest.fixture
def rabbit_env():
    """The environment of processes whose broker is the RabbitMQ on this machine, with a
    queue of this test's own (and the direct exchange Celery names after it), created
    by the processes and deleted at the end: runs sharing one RabbitMQ never consume
    each other's tasks."""
    from kombu import Connection, Exchange, Queue

    queue = f"seckill-test-{uuid.uuid4().hex[:12]}"
    yield subprocess_env(CELERY_BROKER_URL=RABBITMQ_URL, CELERY_TASK_DEFAULT_QUEUE=queue)
    with Connection(RABBITMQ_URL, connect_timeout=5) as conn:
        channel = conn.channel()
        Queue(queue, channel=channel).delete()
        Exchange(queue, channel=channel).delete()
        channel.close()


@pytest.fixture
def celery_worker(transactional_db, process_logs):
    """A real Celery worker process on the test database and broker."""
    worker = start_celery_worker(process_logs)
    yield worker
    worker.stop()


@pytest.fixture
def web_server(transactional_db, process_logs):
    """gunicorn serving the project on the test database; yields its base URL."""
    process, base = start_gunicorn(process_logs, workers=2, threads=8)
    yield base
    process.stop()


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    """A real local Redis Cluster (tests/drills/infra.py: LocalCluster), started once per
    test module."""
    from .drills.infra import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def on_cluster(redis_cluster, settings):
    """This test's stock engine is the cluster (flushed first); returns the environment for
    the processes it starts."""
    redis_cluster.flush()
    settings.SECKILL_REDIS_CLUSTER = True
    settings.SECKILL_REDIS_URL = redis_cluster.url
    reset_stock_redis()
    yield {"SECKILL_REDIS_CLUSTER": "true", "SECKILL_REDIS_URL": redis_cluster.url}
    reset_stock_redis()


class Counted:
    """The ASGI app Django's site chain is served by (a2wsgi), counting the requests it is handed."""

    def __init__(self, app):
        self.app, self.calls = app, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.calls += 1
        return await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def wsgi_application():
    """The WSGI stacks (server.handlers.StackDispatcher): token-authenticated API calls take
    the short API_MIDDLEWARE chain, everything else the full one."""
    from server.handlers import StackDispatcher

    return StackDispatcher()


@pytest.fixture(scope="module")
def asgi_application():
    """config.asgi.application (server.app.Shop): purchases enter the sale in one place,
    token-authenticated API calls go straight to the API chain, the rest is handed to the
    WSGI stacks through a2wsgi, counted in ``.handed.calls``. (Imported here: server.app sets
    the web tier's statement timeout on every database connection of the process.)"""
    from server.app import get_application

    app = get_application()
    pool = app.pool
    app.site = app.handed = Counted(app.site)
    yield app
    pool.shutdown(wait=True)
