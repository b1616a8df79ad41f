"""The database reserve joins Redis's share: one owner per unit, and no unit kept back.

The reserve (``SeckillStock.reserve``) is sold only by the database path, while Redis is
out of a web process's reach; Redis never holds it. Once Redis's share cannot cover a
purchase, what is left of the reserve is handed over — the database first (the database
path can no longer sell it), then Redis's stock by as much (``handover.lua``, idempotent)
— so "sold out" is said only when no unit is left anywhere. The units of cancelled
database-path orders go the same way: the reserve never grows once a sale is warmed, which
is what lets Redis count it from above (``ActivityKeys.reserve``).
"""

from inventory.models import SeckillStock
from inventory.services import stock_reserve_release

from .layout import StockLayout
from .redis_client import stock_redis


def reserve_hand_over(*, activity_id: int) -> int:
    """Release what is left of the reserve in the database, then add every unit the
    database has released to Redis's stock. Returns the units added to Redis now (-1: not
    warmed; the next warm-up derives the stock with them)."""
    released = stock_reserve_release(activity_id=activity_id)
    return StockLayout.of(activity_id).handover(stock_redis(), released=released, reserve_left=0)


def released_units_hand_over(*, activity_id: int) -> int:
    """Bring Redis up to what the database has released to its share (a cancelled
    database-path order, a hand-over that reached only the database), and the reserve
    Redis counts down to the database's. Returns the units added now (-1: not warmed)."""
    row = SeckillStock.objects.filter(activity_id=activity_id).values_list("released", "reserve").first()
    if row is None:
        return 0
    released, reserve = row
    return StockLayout.of(activity_id).handover(stock_redis(), released=released, reserve_left=reserve)
