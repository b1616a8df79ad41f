"""How many shards (S) an activity's stock is spread over.

The sale knows (its activity cache, seckill.selectors.activity_shards) and tells the engine
at start-up (SeckillConfig.ready), so the engine below the sale needs no import of it: the
lower layer names what it needs, the upper one provides it.
"""

from collections.abc import Callable

_lookup: Callable[[int], int] | None = None


def shards_lookup_register(lookup: Callable[[int], int]) -> None:
    global _lookup
    _lookup = lookup


def activity_shards(activity_id: int) -> int:
    if _lookup is None:  # a process that never loaded the apps: guessing S would misplace stock
        raise RuntimeError("stock.layout: no shard lookup registered (is the seckill app installed?)")
    return _lookup(activity_id)
