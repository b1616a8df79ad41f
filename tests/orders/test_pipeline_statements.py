"""What one batch of the order pipeline costs the database: its statements, prepared once
per connection, and the indexes each order writes. Pinned so that neither grows back
unnoticed (the figures behind them: docs/DESIGN-NOTES.md, "The order batch").

Real PostgreSQL and Redis: reservations made by the purchase script, orders made by the
consumer the drain runs.
"""

import threading

import pytest
import redis
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from inventory.models import SeckillStock, StockMovement
from orders.models import AnomalyOrder, Order
from orders.services.creation import order_create_direct, orders_create_from_reservations
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import ACKNOWLEDGE_CHUNK, reservations_pending
from stock.scripts import LogEntry, ScriptCode, run_purchase

from ..factories import make_activity, make_users

pytestmark = pytest.mark.django_db(transaction=True)

# A batch is one transaction of two statements: the orders' INSERT with the stock
# guard's UPDATE and the ledger rows, then the given-up lookup after the stock row's lock.
STATEMENTS_PER_BATCH = 2


def reservations(activity, users) -> list[LogEntry]:
    client, keys = stock_redis(), ActivityKeys(activity.pk)
    for user in users:
        reply = run_purchase(client, keys, user_id=user.pk, quantity=1, limit=activity.per_user_limit)
        assert reply.code == ScriptCode.RESERVED, reply
    return reservations_pending(activity_id=activity.pk, count=len(users) + 1)


def batch_statements(activity, entries: list[LogEntry]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        outcome = orders_create_from_reservations(activity_id=activity.pk, entries=entries)
    assert len(outcome.created) == len(entries) and not outcome.released
    sql = [q["sql"] for q in queries.captured_queries]
    assert sql[0] == "BEGIN" and sql[-1] == "COMMIT", sql
    return sql[1:-1]


def test_a_batch_costs_the_same_two_statements_whatever_its_size():
    activity = make_activity(stock=160)
    entries = reservations(activity, make_users(160, prefix="pipe-size-"))

    small = batch_statements(activity, entries[:10])
    large = batch_statements(activity, entries[10:])

    assert len(small) == len(large) == STATEMENTS_PER_BATCH, large
    insert, given_up = large
    assert insert.lstrip().startswith("WITH inserted AS")
    assert "INSERT INTO orders_order" in insert and "UPDATE inventory_seckillstock" in insert
    assert "INSERT INTO inventory_stockmovement" in insert
    assert given_up.startswith("SELECT shard, reservation_id, reason FROM orders_releasedreservation")
    # The arrays travel as parameters: the text is the same for 10 rows and for 150.
    assert small == large
    # Every unit moved once, with its ledger row.
    stock = SeckillStock.objects.get(activity=activity)
    assert stock.available == 0
    deducts = StockMovement.objects.filter(activity=activity, kind=StockMovement.Kind.DEDUCT)
    assert deducts.count() == 160 and deducts.aggregate(u=Sum("quantity"))["u"] == 160
    assert set(deducts.values_list("order_id", flat=True)) == set(
        Order.objects.filter(activity=activity).values_list("pk", flat=True)
    )


def test_the_batch_statements_are_parsed_once_per_connection():
    activity = make_activity(stock=30)
    entries = reservations(activity, make_users(30, prefix="pipe-prep-"))
    for start in range(0, 30, 10):
        batch_statements(activity, entries[start : start + 10])

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s OR statement LIKE %s",
            ["%WITH inserted AS%", "%FROM orders_releasedreservation%"],
        )
        prepared = cursor.fetchall()
    # One prepared statement each, run three times: the text was parsed once.
    assert sorted(runs for _, runs in prepared) == [3, 3], prepared


def test_the_guard_still_refuses_what_the_database_does_not_have():
    """The guard's UPDATE is in the statement that inserts the orders: when it finds too
    few units, the whole batch rolls back, and the reservations are judged one by one."""
    activity = make_activity(stock=12)
    entries = reservations(activity, make_users(12, prefix="pipe-guard-"))
    SeckillStock.objects.filter(activity=activity).update(available=9)  # three units lost in the database

    outcome = orders_create_from_reservations(activity_id=activity.pk, entries=entries)

    assert len(outcome.created) == 9 and len(outcome.released) == 3
    assert Order.objects.filter(activity=activity).count() == 9
    assert StockMovement.objects.filter(activity=activity).count() == 9
    assert SeckillStock.objects.get(activity=activity).available == 0
    assert AnomalyOrder.objects.filter(activity=activity, kind=AnomalyOrder.Kind.DB_GUARD_FAILED).count() == 3


def test_the_database_path_takes_the_reserve_in_the_same_statement():
    activity = make_activity(stock=10, db_reserve=2)
    users = make_users(3, prefix="pipe-reserve-")

    made = [order_create_direct(activity_id=activity.pk, user_id=u.pk, quantity=1) for u in users[:2]]
    stock = SeckillStock.objects.get(activity=activity)
    assert (stock.available, stock.reserve) == (8, 0)
    assert list(
        StockMovement.objects.filter(activity=activity).values_list("order_id", "kind", "reason").order_by("id")
    ) == [(o.pk, "deduct", "order_created_db_path") for o in made]

    from inventory.services import InsufficientStock

    with pytest.raises(InsufficientStock):
        order_create_direct(activity_id=activity.pk, user_id=users[2].pk, quantity=1)
    # Nothing of the refused order is left: no row, no ledger row, no unit moved.
    assert Order.objects.filter(activity=activity).count() == 2
    assert StockMovement.objects.filter(activity=activity).count() == 2
    assert SeckillStock.objects.get(activity=activity).available == 8


def test_an_order_row_writes_six_indexes_and_its_ledger_row_three():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, count(*) FROM pg_indexes"
            " WHERE tablename IN ('orders_order', 'inventory_stockmovement') GROUP BY tablename"
        )
        indexes = dict(cursor.fetchall())
        cursor.execute(
            "SELECT conrelid::regclass::text, count(*) FROM pg_constraint WHERE contype = 'f'"
            " AND conrelid::regclass::text IN ('orders_order', 'inventory_stockmovement') GROUP BY 1"
        )
        foreign_keys = dict(cursor.fetchall())
    assert indexes == {"orders_order": 6, "inventory_stockmovement": 3}
    # The guarantees stay: every order's activity and shopper, every ledger row's activity and order.
    assert foreign_keys == {"orders_order": 2, "inventory_stockmovement": 2}


def test_batches_due_in_the_same_second_ask_redis_for_their_deadline_task_once(monkeypatch):
    activity = make_activity(stock=20)
    entries = reservations(activity, make_users(20, prefix="pipe-due-"))
    asked: list[str] = []
    original = redis.Redis.execute_command

    def counting(self, *args, **kwargs):
        if args[0] == "SET" and ":expiry:" in str(args[1]):
            asked.append(str(args[1]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "execute_command", counting)
    for start in range(0, 20, 5):
        orders_create_from_reservations(activity_id=activity.pk, entries=entries[start : start + 5])

    seconds = {o.pay_deadline.timestamp().__ceil__() for o in Order.objects.filter(activity=activity)}
    # One question per deadline second (four batches within one or two seconds).
    assert len(asked) == len(set(asked)) == len(seconds), (asked, seconds)


@pytest.mark.parametrize("engine", ["single", "cluster"])
def test_a_batch_leaves_the_log_in_commands_of_a_bounded_size(engine, request):
    """Redis runs one command at a time and spends 3-4.5 µs per id an XDEL drops: a
    drain batch's 500 ids in one command held every purchase behind it for 1.4-2.1 ms.
    The entries go in chunks, in the same round trip; what the log keeps is unchanged.
    On a Cluster too (its pipeline groups the commands by node)."""
    if engine == "cluster":
        request.getfixturevalue("on_cluster")
    activity = make_activity(stock=3 * ACKNOWLEDGE_CHUNK)
    entries = reservations(activity, make_users(2 * ACKNOWLEDGE_CHUNK + 20))
    client, keys = stock_redis(), ActivityKeys(activity.pk)
    client.hset(keys.attempts, mapping={entry.reservation_id: 1 for entry in entries[:3]})
    # MONITOR watches one server: the one that holds the activity's log.
    server = client.get_node_from_key(keys.log).redis_connection if engine == "cluster" else client
    sentinel = f"acknowledged-{activity.pk}"
    commands: list[str] = []
    with server.monitor() as monitor:
        watching = threading.Thread(target=_commands_until, args=(monitor, sentinel, commands))
        watching.start()
        try:
            batch_statements(activity, entries)
        finally:
            server.echo(sentinel)
            watching.join(timeout=60)
    assert not watching.is_alive(), "the monitor never saw the end of the batch"
    dropped = [parts for parts in map(str.split, commands) if parts[:2] == ["XDEL", keys.log]]
    assert dropped, commands
    assert max(len(command) - 2 for command in dropped) <= ACKNOWLEDGE_CHUNK
    assert sum(len(command) - 2 for command in dropped) == len(entries)
    assert client.xlen(keys.log) == 0 and client.hlen(keys.attempts) == 0
    assert Order.objects.filter(activity=activity).count() == len(entries)


def _commands_until(monitor, sentinel: str, commands: list[str]) -> None:
    for message in monitor.listen():
        command = message["command"]
        if sentinel in command:
            return
        commands.append(command)
