"""Helpers of the lifecycle tests: real reservations and orders, and a fingerprint of
every piece of state reconciliation may touch."""

from django.db import connection

from inventory.models import SeckillStock, StockMovement
from orders.models import AnomalyOrder, Order, ReconciliationReport
from orders.services.creation import orders_create_from_reservations
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending
from stock.scripts import LogEntry, ScriptCode, run_purchase


def reserve(activity, user, quantity: int = 1) -> LogEntry:
    """The purchase script alone: a reservation in Redis, no order yet."""
    reply = run_purchase(stock_redis(), ActivityKeys(activity.pk), user_id=user.pk, quantity=quantity, limit=5)
    assert reply.code == ScriptCode.RESERVED, reply
    return LogEntry(reply.reservation_id, user.pk, quantity, 0)


def buy(activity, users) -> list[Order]:
    """Reserve for each user, then let the consumer create the orders."""
    for user in users:
        reserve(activity, user)
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk))
    return list(Order.objects.filter(activity=activity, user__in=users).order_by("pk"))


def state(activity) -> dict:
    """Everything reconciliation could change, to compare before and after a run."""
    keys = ActivityKeys(activity.pk)
    client = stock_redis()
    return {
        "redis_stock": client.get(keys.stock),
        "redis_log": client.xlen(keys.log),
        "redis_users": client.hgetall(keys.users),
        "redis_returned": client.smembers(keys.returned),
        "db_available": SeckillStock.objects.get(activity=activity).available,
        "orders": list(Order.objects.filter(activity=activity).order_by("pk").values_list("pk", "status")),
        "ledger": list(StockMovement.objects.filter(activity=activity).order_by("pk").values_list("pk", "kind")),
        "anomalies": list(AnomalyOrder.objects.filter(activity=activity).order_by("pk").values_list("pk", "kind")),
    }


def reports(activity) -> int:
    return ReconciliationReport.objects.filter(activity=activity).count()


def close_connection() -> None:
    """Threads open their own database connection; close it when they finish."""
    connection.close()
