"""The scripts that give units back (release.lua, shard_release.lua, shard_return.lua) check
every argument, with the prelude's whole(), before their first write: a bad quantity once
removed the reservation from the log and then failed (its units lost), or, negative, took
units from the stock. Now the invalid-arguments code (ScriptArgumentsInvalid from the
bindings), and Redis is untouched."""

import pytest

from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import (
    RELEASE,
    SHARD_RELEASE,
    SHARD_RETURN,
    ScriptArgumentsInvalid,
    ScriptCode,
    UnitsBack,
    run_release,
    run_shard_release,
    run_shard_returns,
)

# A quantity that is no whole number of at least 1, as Redis receives it. A release may
# give back 0 (a poison entry of quantity 0 leaves the log with nothing to give back).
BAD_QUANTITIES = ["x", "1.5", "0", "-3", ""]
BAD_RELEASED = [q for q in BAD_QUANTITIES if q != "0"]


def reserved(activity_id: int) -> tuple[ActivityKeys, str]:
    """A stock of 9 after one reservation of 1 unit by shopper 7 (its id in the log)."""
    keys = ActivityKeys(activity_id)
    client = stock_redis()
    client.delete(keys.stock, keys.log, keys.users, keys.loaded, keys.restocks, keys.returned)
    client.set(keys.stock, 9)
    client.set(keys.loaded, 10)
    reservation = client.xadd(keys.log, {"u": 7, "q": 1, "s": 0}).decode()
    client.hset(keys.users, 7, reservation)
    return keys, reservation


def untouched(keys: ActivityKeys, reservation: str) -> None:
    client = stock_redis()
    assert client.get(keys.stock) == b"9" and client.get(keys.loaded) == b"10"
    assert [entry_id.decode() for entry_id, _ in client.xrange(keys.log)] == [reservation]
    assert client.hget(keys.users, 7) == reservation.encode()
    assert not client.exists(keys.restocks) and not client.smembers(keys.returned)


@pytest.mark.parametrize("quantity", BAD_RELEASED)
@pytest.mark.parametrize("units_back", ["1", "0"])
def test_release_refuses_a_bad_quantity_before_writing(quantity, units_back):
    keys, reservation = reserved(9201)
    reply = RELEASE(
        keys=[keys.stock, keys.users, keys.log, keys.failed, keys.loaded],
        args=[reservation, "7", quantity, "1", "expired", "", units_back],
        client=stock_redis(),
    )
    assert reply == ScriptCode.INVALID
    untouched(keys, reservation)


@pytest.mark.parametrize("user_id", ["", "x", "0"])
def test_release_refuses_a_bad_user_id_before_writing(user_id):
    keys, reservation = reserved(9202)
    reply = RELEASE(
        keys=[keys.stock, keys.users, keys.log, keys.failed, keys.loaded],
        args=[reservation, user_id, "1", "1", "expired", "", "1"],
        client=stock_redis(),
    )
    assert reply == ScriptCode.INVALID
    untouched(keys, reservation)


@pytest.mark.parametrize("quantity", BAD_RELEASED)
def test_shard_release_refuses_a_bad_quantity_before_writing(quantity):
    keys, reservation = reserved(9203)
    reply = SHARD_RELEASE(
        keys=[keys.stock, keys.log, keys.loaded, keys.restocks], args=[reservation, quantity, "1"], client=stock_redis()
    )
    assert reply == ScriptCode.INVALID
    untouched(keys, reservation)


@pytest.mark.parametrize("quantity", BAD_QUANTITIES)
def test_shard_return_refuses_a_bad_quantity_before_writing(quantity):
    keys, reservation = reserved(9204)
    reply = SHARD_RETURN(keys=[keys.stock, keys.returned, keys.restocks], args=["SK1", quantity], client=stock_redis())
    assert reply == ScriptCode.INVALID
    untouched(keys, reservation)


def test_the_bindings_raise_for_a_refused_quantity_and_write_nothing():
    keys, reservation = reserved(9205)
    client = stock_redis()
    with pytest.raises(ScriptArgumentsInvalid):
        run_release(
            client, keys, reservation_id=reservation, user_id=7, quantity=-1, free_participant=True, reason="expired"
        )
    with pytest.raises(ScriptArgumentsInvalid):
        run_shard_release(client, keys, reservation_id=reservation, quantity=-1)
    with pytest.raises(ScriptArgumentsInvalid):
        run_shard_returns(client, keys, [UnitsBack("SK1", 0, 7, reservation)])
    untouched(keys, reservation)


def test_good_arguments_give_back_as_before():
    keys, reservation = reserved(9206)
    client = stock_redis()
    assert run_release(
        client, keys, reservation_id=reservation, user_id=7, quantity=1, free_participant=True, reason="expired"
    )
    assert client.get(keys.stock) == b"10" and client.xlen(keys.log) == 0 and not client.hexists(keys.users, 7)
    assert not run_release(
        client, keys, reservation_id=reservation, user_id=7, quantity=1, free_participant=True, reason="expired"
    )
    assert run_shard_returns(client, keys, [UnitsBack("SK1", 2, 7, reservation)]) == [True]
    assert run_shard_returns(client, keys, [UnitsBack("SK1", 2, 7, reservation)]) == [False]
    assert client.get(keys.stock) == b"12" and client.get(keys.restocks) == b"1"
