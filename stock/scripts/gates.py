"""The gates' scripts (stock/lua/gates/), run on the cache Redis before any stock is
touched: the admission cap's token bucket, the shopper's token look-up with the rate
limits in one call, and the token filter's fill."""

from dataclasses import dataclass

from core.metrics import script_timer

from ..keys import ActivityKeys
from ..redis_client import StockRedis
from .loader import lua_script

ADMISSION = lua_script("gates/admission")
SHOPPER_GATE = lua_script("gates/shopper_gate")
TOKEN_FILTER_ADD = lua_script("gates/token_filter_add")


def run_admission(client: StockRedis, keys: ActivityKeys, *, rate: int, burst: int) -> tuple[bool, int]:
    """Take one token from the activity's admission bucket: (admitted, ms until one is there)."""
    admitted, wait_ms = ADMISSION(keys=[keys.admission], args=[rate, burst], client=client)
    return bool(admitted), int(wait_ms)


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` requests per fixed window of ``seconds``, counted under ``name``
    (the per-user one: ``name:<user id>``)."""

    name: str
    count: int
    seconds: int


@dataclass(frozen=True)
class GateReply:
    shopper: str | None  # the token's cache entry ("user_id:username:mac"), or the id given; None: not cached
    over: int  # 0, or which limit is over (1 per user, 2 per address, 4 failed authentications); 3: no such token
    ms_left: int  # until that limit's window ends


GATE_OVER_USER, GATE_OVER_ADDRESS, GATE_UNKNOWN_TOKEN, GATE_OVER_FAILURES = 1, 2, 3, 4


@dataclass(frozen=True)
class TokenFilter:
    """A Bloom filter in the cache Redis: ``bits`` (a string of bits) and ``params`` (a
    hash: bits, hashes)."""

    bits: str
    params: str


@dataclass(frozen=True)
class TokenLookup:
    """What the gate script needs to look a token up when the cache holds no entry for it:
    the token's entry, its refused-token entry, the filter and the token's two hashes in
    it, and the failed-authentication counter of the client's address."""

    entry: str
    refused: str
    filter: TokenFilter
    hashes: tuple[int, int]
    refused_ms: int
    failures: RateLimit | None


def run_shopper_gate(
    client: StockRedis,
    *,
    lookup: TokenLookup | None,
    user_id: int | None,
    count: bool,
    per_user: RateLimit | None,
    per_address: RateLimit | None,
    refused: bool = False,
) -> GateReply:
    """The token lookup (``lookup``, when ``user_id`` is None) and the rate limits (when
    ``count``) in one call to the cache Redis; ``refused``: the database refused the token
    (remembered, and counted against the address). See lua/gates/shopper_gate.lua."""
    mode = "refused" if refused else "1" if count else "0"
    args = ["" if user_id is None else user_id, mode]
    args += [per_user.name, per_user.count, per_user.seconds] if per_user else ["", 0, 1]
    args += [per_address.name, per_address.count, per_address.seconds] if per_address else ["", 0, 1]
    if lookup is None:
        keys = ["-"] * 4  # not read when the id is given
        args += ["", 0, 1, 0, 1, 0]
    else:
        keys = [lookup.entry, lookup.refused, lookup.filter.bits, lookup.filter.params]
        failures = lookup.failures
        args += [failures.name, failures.count, failures.seconds] if failures else ["", 0, 1]
        args += [*lookup.hashes, lookup.refused_ms]
    with script_timer("shopper_gate"):
        shopper, over, ms_left = SHOPPER_GATE(keys=keys, args=args, client=client)
    if isinstance(shopper, bytes):
        shopper = shopper.decode()
    return GateReply(None if shopper is None else str(shopper), int(over), int(ms_left))


def run_token_filter_add(client: StockRedis, filters: list[TokenFilter], hashes: list[tuple[int, int]]) -> int:
    """Set the bits of tokens' hashes in each of ``filters`` that exists; returns how many."""
    if not hashes:
        return 0
    keys = [name for f in filters for name in (f.bits, f.params)]
    with script_timer("token_filter_add"):
        return int(TOKEN_FILTER_ADD(keys=keys, args=[h for pair in hashes for h in pair], client=client))
