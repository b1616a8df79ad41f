"""What is left to sell, as pages, the list, the flag and the API show it."""

import logging

import redis

from seckill.sale.snapshot import activity_shards
from stock.breaker import redis_away
from stock.layout import StockLayout
from stock.redis_client import stock_redis

logger = logging.getLogger(__name__)


def redis_remaining(activity_id: int) -> int | None:
    """Units Redis may still sell (every shard), or None when the activity is not warmed."""
    return StockLayout.of(activity_id).totals(stock_redis())[0]


def units_left_many(activity_ids: list[int]) -> dict[int, int | None]:
    """What pages, the list, the flag and the API show as ``remaining``: the units still for
    sale — Redis's stock and the database reserve not handed over yet — as they were at one
    moment (``StockLayout.units_left``), so a 0 here means what a ``sold_out`` answer means.
    None for an activity that is not warmed, and for every one while Redis is away
    (unknown: a page still shows, without the figure)."""
    if not activity_ids:
        return {}
    unknown: dict[int, int | None] = dict.fromkeys(activity_ids)
    if redis_away():
        return unknown
    client = stock_redis()
    layouts = [StockLayout(a, activity_shards(a)) for a in activity_ids]
    try:
        # One key: the stock and the reserve by one MGET per activity (one hash tag, so one
        # slot), all in one pipeline: the activities' keys live in different Cluster slots.
        single = [layout for layout in layouts if not layout.sharded]
        pipe = client.pipeline(transaction=False)
        for layout in single:
            pipe.mget([layout.keys.stock, layout.keys.reserve])
        values = pipe.execute() if single else []
        left: dict[int, int | None] = {
            layout.activity_id: None if stock is None else int(stock) + int(reserve or 0)
            for layout, (stock, reserve) in zip(single, values, strict=True)
        }
        for layout in layouts:
            if layout.sharded:
                units = layout.units_left(client)
                # A zero read while the shards kept moving is no fact: unknown, not "sold out".
                left[layout.activity_id] = units.units if units.settled or units.units else None
    except redis.RedisError as exc:
        logger.warning("remaining stock unknown, Redis unavailable: %s", exc)
        return unknown
    return {a: (max(0, v) if v is not None else None) for a, v in left.items()}
