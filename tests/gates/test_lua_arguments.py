"""The stock scripts check every argument before their first write: a bad one answers the
invalid-arguments code (ScriptArgumentsInvalid from the bindings), and Redis is untouched."""

import pytest

from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import (
    CLAIM,
    PURCHASE,
    SHARD_PURCHASE,
    ScriptArgumentsInvalid,
    ScriptCode,
    UnitsBack,
    run_returns,
    run_warmup,
)


def untouched(keys: ActivityKeys, stock: bytes | None = b"10") -> None:
    client = stock_redis()
    assert client.get(keys.stock) == stock
    assert client.xlen(keys.log) == 0 and not client.hgetall(keys.users)
    assert not client.exists(keys.drain) and not client.smembers(keys.returned)


def armed(activity_id: int) -> ActivityKeys:
    keys = ActivityKeys(activity_id)
    stock_redis().set(keys.stock, 10)
    return keys


# user id, quantity, limit, shard, drain flag lifetime (ms)
GOOD = ["7", "1", "2", "0", "2000"]
BAD = {
    "user id empty": 0,
    "user id not a number": 0,
    "limit zero": 2,
    "limit fractional": 2,
    "shard negative": 3,
    "drain lifetime not a number": 4,
    "drain lifetime zero": 4,
}
VALUES = {
    "user id empty": "",
    "user id not a number": "x",
    "limit zero": "0",
    "limit fractional": "1.5",
    "shard negative": "-1",
    "drain lifetime not a number": "soon",
    "drain lifetime zero": "0",
}


@pytest.mark.parametrize("case", list(BAD))
def test_purchase_refuses_bad_arguments_before_writing(case):
    keys = armed(9101)
    args = list(GOOD)
    args[BAD[case]] = VALUES[case]
    reply = PURCHASE(
        keys=[keys.stock, keys.users, keys.log, keys.failed, keys.drain, keys.reserve], args=args, client=stock_redis()
    )
    assert int(reply[0]) == ScriptCode.INVALID
    untouched(keys)


@pytest.mark.parametrize("case", list(BAD))
def test_shard_purchase_refuses_bad_arguments_before_writing(case):
    keys = armed(9102)
    args = list(GOOD)
    args[BAD[case]] = VALUES[case]
    reply = SHARD_PURCHASE(keys=[keys.stock, keys.log, keys.drain], args=args, client=stock_redis())
    assert int(reply[0]) == ScriptCode.INVALID
    untouched(keys)


def test_valid_purchase_behaves_as_before():
    keys = armed(9103)
    reply = PURCHASE(
        keys=[keys.stock, keys.users, keys.log, keys.failed, keys.drain, keys.reserve], args=GOOD, client=stock_redis()
    )
    assert int(reply[0]) == ScriptCode.RESERVED and int(reply[1]) == 9 and int(reply[3]) == 1


def test_claim_refuses_a_bad_time_before_writing():
    keys = ActivityKeys(9104)
    assert CLAIM(keys=[keys.users, keys.failed, keys.pending], args=["7", "c:1", "soon"], client=stock_redis()) == -4
    assert not stock_redis().hgetall(keys.users) and not stock_redis().zcard(keys.pending)


@pytest.mark.parametrize("quantity", [0, -3])
def test_return_refuses_a_bad_quantity_before_writing(quantity):
    keys = armed(9105)
    with pytest.raises(ScriptArgumentsInvalid):
        run_returns(stock_redis(), keys, [UnitsBack("SK1", quantity, 7, "1-0")])
    untouched(keys)


@pytest.mark.parametrize("remaining, loaded", [(-1, 10), (5, -1)])
def test_warmup_refuses_bad_figures_before_writing(remaining, loaded):
    keys = ActivityKeys(9106)
    with pytest.raises(ScriptArgumentsInvalid):
        run_warmup(stock_redis(), keys, remaining=remaining, loaded=loaded, expected=None, log_length=0)
    untouched(keys, stock=None)
    assert not stock_redis().exists(keys.loaded)
