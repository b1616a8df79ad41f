"""The stock engine's Lua scripts as files: sorted by domain under stock/lua/ (stock, gates,
room), each registered once by the one loader (stock/scripts/loader.py) with the shared
prelude (stock/lua/prelude.lua) in front, no script carrying its own copy of a prelude
helper, each header stating its KEYS and ARGV, and every script compiling in a real Redis
and on every primary of a real Redis Cluster."""

import re

import pytest
import redis

import stock.scripts  # noqa: F401  (registers every script)
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.scripts import ADMISSION, FREEZE, ROOM_JOIN, ROOM_TICK
from stock.scripts.loader import LUA_DIR, PRELUDE, REGISTERED, script_source

DOMAINS = ("stock", "gates", "room")
# The helpers the prelude defines, as `local function name(`.
HELPER = re.compile(r"^local function (\w+)\(", re.M)


def lua_files() -> dict[str, str]:
    """Every script file, by its name under stock/lua/ without ".lua" (the prelude aside)."""
    return {
        path.relative_to(LUA_DIR).with_suffix("").as_posix(): path.read_text()
        for path in sorted(LUA_DIR.rglob("*.lua"))
        if path != PRELUDE
    }


def header(text: str) -> str:
    """The comment lines a script opens with."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_every_script_sits_in_its_domain_folder_and_is_registered_once():
    assert set(lua_files()) == set(REGISTERED), "a .lua file the loader does not register, or the reverse"
    outside = [name for name in lua_files() if name.split("/")[0] not in DOMAINS or name.count("/") != 1]
    assert outside == [], f"scripts outside stock/lua/{{{','.join(DOMAINS)}}}/"


def test_the_prelude_comes_first_in_every_registered_script():
    prelude = PRELUDE.read_bytes()
    for name, script in REGISTERED.items():
        assert script.script == script_source(name)
        assert script.script.startswith(prelude), name
        assert script.script.endswith((LUA_DIR / f"{name}.lua").read_bytes()), name


def test_no_script_carries_its_own_copy_of_a_prelude_helper():
    helpers = set(HELPER.findall(PRELUDE.read_text()))
    assert "whole" in helpers
    copies = {name: sorted(helpers & set(HELPER.findall(text))) for name, text in lua_files().items()}
    assert {name: found for name, found in copies.items() if found} == {}


def test_the_prelude_only_defines_helpers():
    code = [line for line in PRELUDE.read_text().splitlines() if line.strip() and not line.startswith("--")]
    assert not any(word in line for line in code for word in ("redis.", "KEYS", "ARGV", "return {"))


@pytest.mark.parametrize("name", sorted(lua_files()))
def test_each_header_states_its_keys_and_argv(name):
    opening = header(lua_files()[name])
    assert re.search(r"^-- KEYS\b", opening, re.M), f"{name}.lua: no KEYS line in its header"
    assert re.search(r"^-- ARGV\b|^-- .*\bARGV\[1\]", opening, re.M), f"{name}.lua: no ARGV line in its header"
    used = set(re.findall(r"\b(KEYS|ARGV)\[(\d+)\]", lua_files()[name]))
    stated = set(re.findall(r"\b(KEYS|ARGV)\[(\d+)", opening))
    assert used <= stated, f"{name}.lua uses {sorted(used - stated)} without stating them in its header"


def room_keys(keys: ActivityKeys) -> list[str]:
    return [keys.room_state, keys.room_queue, keys.room_active, keys.room_admitted, keys.stock, keys.room_rate_samples]


SEED = "ab" * 32  # a well-formed seed: the join's refusals below are for its other arguments

# Scripts whose own checks became the prelude's whole(): each refuses a number that is not
# whole, or below its least, before any write (admission, freeze and the tick with an
# error reply, the join with -4).
REFUSALS = {
    "admission: a fractional rate": (ADMISSION, lambda k: [k.admission], ["0.5", "5"]),
    "admission: no burst": (ADMISSION, lambda k: [k.admission], ["1", "0"]),
    "freeze: a log length that is no number": (FREEZE, lambda k: [k.stock, k.log], ["", "x"]),
    "room join: user 0": (
        ROOM_JOIN,
        lambda k: [k.room_state, k.room_pre, k.room_queue, k.room_places],
        ["0", "1", SEED],
    ),
    "room join: a start that is no number": (
        ROOM_JOIN,
        lambda k: [k.room_state, k.room_pre, k.room_queue, k.room_places],
        ["7", "soon", SEED],
    ),
    "room join: no seed": (ROOM_JOIN, lambda k: [k.room_state, k.room_pre, k.room_queue, k.room_places], ["7", "1"]),
    "room join: a seed that is not 64 hex digits": (
        ROOM_JOIN,
        lambda k: [k.room_state, k.room_pre, k.room_queue, k.room_places],
        ["7", "1", "Z" * 64],
    ),
    "room tick: a fractional rate": (ROOM_TICK, lambda k: [*room_keys(k), k.reserve], ["1.5", "0", "1000", ""]),
    "room tick: a negative cap": (ROOM_TICK, lambda k: [*room_keys(k), k.reserve], ["1", "-1", "1000", ""]),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", list(REFUSALS))
def test_the_prelude_s_check_refuses_before_any_write(case):
    script, key_names, args = REFUSALS[case]
    keys = ActivityKeys(9301)
    client = stock_redis()
    client.delete(*key_names(keys))
    try:
        reply = script(keys=key_names(keys), args=args, client=client)
    except redis.ResponseError as error:
        assert "bad arguments" in str(error)
    else:
        assert reply == [-4, 0]
    assert client.exists(*key_names(keys)) == 0


@pytest.mark.django_db
def test_every_script_compiles_in_redis_with_the_sha_it_is_called_by():
    client = stock_redis()
    for name, script in REGISTERED.items():
        assert client.script_load(script.script) == script.sha, name


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_script_loads_on_every_primary_of_a_redis_cluster(on_cluster):
    client = stock_redis()
    for name, script in REGISTERED.items():
        assert client.script_load(script.script) == script.sha, name
        assert all(client.script_exists(script.sha)), f"{name} missing on a primary"
