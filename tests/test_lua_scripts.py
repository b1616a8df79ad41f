"""The stock engine's Lua scripts as files: sorted by domain under stock/lua/ (stock, gates,
room), each registered once by the one loader (stock/scripts/loader.py) with the shared
prelude (stock/lua/prelude.lua) in front, no script carrying its own copy of a prelude
helper, each header stating its KEYS and ARGV, and every script compiling in a real Redis
and on every primary of a real Redis Cluster."""

import re

import pytest

import stock.scripts  # noqa: F401  (registers every script)
from stock.redis_client import stock_redis
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
