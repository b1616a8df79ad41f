"""What every part of the waiting room shares: whether a sale has one, when it opens, the
clock's units, the units left as the room's scripts take them, and its two refusals."""

from datetime import UTC, datetime, timedelta

from core.errors import ApiError, busy
from seckill.models import AdmissionMode
from seckill.sale.snapshot import ActivitySnapshot
from stock.layout import StockLayout
from stock.redis_client import stock_redis


def room_used(activity: ActivitySnapshot) -> bool:
    return activity.admission_mode == AdmissionMode.ROOM


def prequeue_opens_at(activity: ActivitySnapshot) -> datetime:
    return activity.start_at - timedelta(minutes=activity.room_prequeue_minutes)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def moment(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms is not None else None


def room_units_left(shards: int, activity_id: int) -> int | None:
    """What the room's scripts take as the units left: None for one key (the script reads
    the stock and the reserve itself, in its own atomic step); with S > 1 every shard and
    the reserve read here (``StockLayout.units_left``), -1 when unknown — a zero read while
    the shards kept moving is no fact, and the room closes only on a fact."""
    if shards == 1:
        return None
    left = StockLayout(activity_id, shards).units_left(stock_redis())
    if left.units is None or (left.units <= 0 and not left.settled):
        return -1
    return left.units


def room_away() -> ApiError:
    return busy("The waiting room cannot be reached just now; please try again in a moment.")


def require_room(activity: ActivitySnapshot) -> None:
    if not room_used(activity):
        raise ApiError(409, "room_not_used", "This sale has no waiting room: buy directly.")
