import json
from decimal import Decimal, InvalidOperation

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from inventory.models import Product
from seckill.models import Activity
from seckill.sale.activities import activity_create
from seckill.sale.lifecycle import WarmupError, activity_warmup

from ._time import parse_when


def _money(value: str, option: str) -> Decimal:
    try:
        amount = Decimal(value)
    except InvalidOperation as exc:
        raise CommandError(f"{option} {value!r} is not an amount such as 99.00") from exc
    if not amount.is_finite() or amount < 0:
        raise CommandError(f"{option} {value!r}: an amount must be a non-negative number such as 99.00")
    try:  # at most 8 digits before the point and 2 after, as the columns hold
        Product._meta.get_field("list_price").run_validators(amount)
    except ValidationError as exc:
        raise CommandError(f"{option} {value!r}: {' '.join(exc.messages)}") from exc
    return amount


def _owner(username: str | None):
    if username is None:
        return None
    owner = get_user_model().objects.filter(username=username).first()
    if owner is None:
        raise CommandError(f"--owner {username!r}: no account has that username")
    if not owner.is_staff:
        raise CommandError(f"--owner {username!r} is not a staff account: a merchant runs sales in the admin")
    return owner


class Command(BaseCommand):
    help = 'Create a flash-sale activity (and its product if new); prints {"id": …} as JSON.'

    def add_arguments(self, parser):
        parser.add_argument("--title", required=True)
        parser.add_argument("--product-name", required=True)
        parser.add_argument("--price", required=True, help="list price, e.g. 99.00")
        parser.add_argument("--seckill-price", required=True, help="sale price, e.g. 0.10")
        parser.add_argument("--stock", required=True, type=int)
        parser.add_argument("--start", required=True, help="ISO-8601 or +SECONDS")
        parser.add_argument("--end", required=True, help="ISO-8601 or +SECONDS")
        parser.add_argument("--per-user-limit", type=int, default=1)
        parser.add_argument("--shards", type=int, default=1)
        parser.add_argument("--safety-stock", type=int, default=0)
        parser.add_argument(
            "--db-reserve",
            type=int,
            default=None,
            help="units only the database path sells while Redis is away (default: SECKILL_DB_RESERVE_PERCENT %%)",
        )
        parser.add_argument("--pay-timeout", type=int, default=None, help="seconds to pay (default 900)")
        parser.add_argument("--admission", choices=["direct", "room"], default="direct", help="room: a waiting room")
        parser.add_argument(
            "--prequeue-minutes", type=int, default=15, help="the room opens this long before the start"
        )
        parser.add_argument("--admission-rate", type=int, default=20, help="shoppers the room lets in per second")
        parser.add_argument("--admission-cap", type=int, default=200, help="let in and not done, at most (0: none)")
        parser.add_argument("--admission-window", type=int, default=120, help="seconds to buy once let in")
        parser.add_argument(
            "--owner",
            metavar="USERNAME",
            default=None,
            help="the merchant who runs the sale (a staff account); without it only staff who see every sale see it",
        )
        parser.add_argument("--warmup", action="store_true", help="load the stock into Redis now")

    def handle(self, *args, **o):
        now = timezone.now()
        if o["stock"] < 1:
            raise CommandError("--stock must be at least 1")
        # Every argument is checked before anything is written: a typo leaves no product behind.
        list_price, seckill_price = _money(o["price"], "--price"), _money(o["seckill_price"], "--seckill-price")
        start_at, end_at = parse_when(o["start"], now=now), parse_when(o["end"], now=now)
        if end_at <= start_at:
            raise CommandError(f"--end ({end_at.isoformat()}) must be after --start ({start_at.isoformat()})")
        owner = _owner(o["owner"])
        try:
            with transaction.atomic():
                product, _ = Product.objects.get_or_create(name=o["product_name"], defaults={"list_price": list_price})
                activity = activity_create(
                    title=o["title"],
                    product=product,
                    seckill_price=seckill_price,
                    start_at=start_at,
                    end_at=end_at,
                    total_stock=o["stock"],
                    per_user_limit=o["per_user_limit"],
                    shards=o["shards"],
                    safety_stock=o["safety_stock"],
                    db_reserve=o["db_reserve"],
                    pay_timeout=o["pay_timeout"],
                    owner=owner,
                )
                if o["admission"] == "room":
                    activity.admission_mode = Activity.AdmissionMode.ROOM
                    activity.room_prequeue_minutes = o["prequeue_minutes"]
                    activity.room_rate = o["admission_rate"]
                    activity.room_cap = o["admission_cap"]
                    activity.room_window_seconds = o["admission_window"]
                    activity.full_clean()
                    room_fields = ["admission_mode", "room_prequeue_minutes", "room_rate", "room_cap"]
                    activity.save(update_fields=[*room_fields, "room_window_seconds"])
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        result: dict[str, object] = {"id": activity.pk}
        if o["warmup"]:
            try:
                result["warmup"] = activity_warmup(activity_id=activity.pk).as_dict()
            except WarmupError as exc:
                raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(result))
