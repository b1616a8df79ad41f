"""core.loop_database: the event loop's own connection to the real PostgreSQL the tests run
on. A statement is prepared once, any parameter is a value, a failed statement leaves the
connection serving, a connection the server closed or a statement past its time is
replaced without failing the next read, and a database that is away is Django's
OperationalError at once."""

import asyncio
import socket

import psycopg
import pytest
from django.db import OperationalError, connection, connections

import core.loop_database as loop_database_module
from core.loop_database import LoopDatabase

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def database():
    loop_database = LoopDatabase()
    yield loop_database
    loop_database.close_all()


def test_a_statement_is_prepared_once_on_the_loops_connection(database):
    async def twice():
        first = await database.fetch_all("SELECT %s::int + 1", [1])
        second = await database.fetch_all("SELECT %s::int + 1", [41])
        prepared = await database.fetch_all(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["SELECT $1::int + 1%"]
        )
        return first, second, prepared

    assert asyncio.run(twice()) == ([(2,)], [(42,)], [(1,)])


def test_a_connection_the_server_closed_is_replaced_and_the_read_goes_on(database):
    """A database that restarted closes every connection: the loop's next lookup is made on
    a new one instead of failing the purchases of a whole batch."""

    def terminated(pid: int) -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            return cursor.fetchone()[0]

    async def across_a_restart():
        (before,) = await database.fetch_all("SELECT pg_backend_pid()", [])
        assert await asyncio.to_thread(terminated, before[0])
        (after,) = await database.fetch_all("SELECT pg_backend_pid()", [])
        return before[0], after[0]

    before, after = asyncio.run(across_a_restart())
    assert before != after


def test_a_database_away_is_an_operational_error_and_not_tried_again_at_once(database):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings_dict = connections["default"].settings_dict
    real = settings_dict["PORT"], settings_dict["HOST"]
    settings_dict["PORT"], settings_dict["HOST"] = port, "127.0.0.1"
    try:

        async def twice():
            errors = []
            for _ in range(2):
                with pytest.raises(OperationalError) as caught:
                    await database.fetch_all("SELECT 1", [])
                errors.append(str(caught.value))
            return errors

        first, second = asyncio.run(twice())
    finally:
        settings_dict["PORT"], settings_dict["HOST"] = real
    assert "could not be made" in first
    assert "moments ago" in second, "the second call did not wait for the same timeout"
    database.close_all()  # as the retry time ends
    assert asyncio.run(database.fetch_all("SELECT 1", [])) == [(1,)], "back once the database is"


def test_any_text_goes_through_the_statement_unchanged(database):
    """The parameters are psycopg's adapters' work, not text pasted into the statement: a
    shopper's made-up token with quotes, braces or backslashes is a value like any other."""
    odd = ['a"b', "c\\d", "{x}", "y,z", " ", "NULL", "'; DROP TABLE x; --", "ünï", ""]
    rows = asyncio.run(database.fetch_all("SELECT unnest(%s::text[]), %s::int, '100%%'", [odd, 7]))
    assert rows == [(value, 7, "100%") for value in odd]


def test_a_statement_that_fails_raises_its_error_and_the_connection_serves_on(database):
    async def fail_then_serve():
        (pid,) = await database.fetch_all("SELECT pg_backend_pid()", [])
        with pytest.raises(psycopg.errors.DivisionByZero):
            await database.fetch_all("SELECT 1 / %s::int", [0])
        return pid, await database.fetch_all("SELECT 1 / %s::int, pg_backend_pid()", [1])

    pid, rows = asyncio.run(fail_then_serve())
    assert rows == [(1, pid[0])]  # the same connection


def test_a_statement_past_its_time_is_an_operational_error_and_the_next_gets_a_new_connection(database, monkeypatch):
    monkeypatch.setattr(loop_database_module, "QUERY_TIMEOUT", 0.3)

    async def slow_then_quick():
        (before,) = await database.fetch_all("SELECT pg_backend_pid()", [])
        with pytest.raises(OperationalError):
            await database.fetch_all("SELECT pg_sleep(%s::float)", [5])
        (after,) = await database.fetch_all("SELECT pg_backend_pid()", [])
        return before[0], after[0]

    before, after = asyncio.run(slow_then_quick())
    assert before != after


def test_statements_sent_at_once_on_one_loop_share_one_connection_and_each_get_their_own_rows(database):
    async def together():
        statement = "SELECT %s::int * 2, pg_backend_pid() FROM pg_sleep(0.01)"
        return await asyncio.gather(*(database.fetch_all(statement, [n]) for n in range(8)))

    rows = [each[0] for each in asyncio.run(together())]
    assert [doubled for doubled, _pid in rows] == [n * 2 for n in range(8)]
    assert len({pid for _doubled, pid in rows}) == 1, "a connection each"
