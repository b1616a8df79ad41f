"""The one loader of the stock engine's Lua scripts: each ``stock/lua/<domain>/<name>.lua``
is registered once, with ``stock/lua/prelude.lua`` (the argument checks every script may
use) prepended, as a redis-py ``Script`` (EVALSHA, reloaded on NOSCRIPT). The client is
passed at call time. Also what every script's reply shares: the codes and the
invalid-arguments refusal."""

from pathlib import Path

from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
PRELUDE = LUA_DIR / "prelude.lua"


class LuaScript(Script):
    """redis-py's Script, sent as EVALSHA straight through ``execute_command``: the
    command method between them costs about as much Python as the rest of the call
    (half of a purchase's two commands). A pipeline's call stays Script's, which has
    the pipeline load its scripts first."""

    def __call__(self, keys=None, args=None, client=None):
        if client is None or isinstance(client, Pipeline):
            return super().__call__(keys, args, client)
        keys = keys or ()
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *(args or ()))
        except NoScriptError:  # not run: a Redis that restarted or another server
            self.sha = client.script_load(self.script)
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *(args or ()))


# Every script registered, by its path under stock/lua/ without ".lua" ("stock/purchase").
REGISTERED: dict[str, LuaScript] = {}


def script_source(name: str) -> bytes:
    """What Redis runs for ``name``: the prelude, then the script's own file."""
    return PRELUDE.read_bytes() + b"\n" + (LUA_DIR / f"{name}.lua").read_bytes()


def lua_script(name: str) -> LuaScript:
    """Register ``stock/lua/<name>.lua`` (``name`` as "stock/purchase"), the prelude first."""
    if name in REGISTERED:
        raise ValueError(f"Lua script {name!r} registered twice")
    # Bytes need no client to hash; the client is always passed at call time.
    script = LuaScript(None, script_source(name))  # type: ignore[arg-type]  # None is fine for bytes
    REGISTERED[name] = script
    return script


class ScriptCode:
    RESERVED = 1
    DUPLICATE = -1
    SOLD_OUT = -2
    NOT_WARMED = -3
    INVALID = -4  # an argument failed the script's own checks; nothing was written
    HELD = -5  # too few units in Redis, but the database reserve holds some: hand it over first
    UNSETTLED = -6  # S > 1: the shards kept moving while a purchase looked for a unit (busy)


class ScriptArgumentsInvalid(ValueError):
    """A stock script refused its arguments (ScriptCode.INVALID) before writing anything."""

    def __init__(self, script: str, args: list[str | int]):
        super().__init__(f"stock script {script!r} refused its arguments {args!r}; nothing written")


def refused_raised(script: str, reply, args: list[str | int]):
    """The script's reply, or ScriptArgumentsInvalid for its invalid-arguments code."""
    if reply == ScriptCode.INVALID:
        raise ScriptArgumentsInvalid(script, args)
    return reply
