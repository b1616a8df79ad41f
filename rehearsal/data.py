"""The rehearsal's data, kept apart from real sales by its tags: every rehearsal sale sells
the product REHEARSAL_PRODUCT and is titled with TITLE_PREFIX, every rehearsal account's
username starts with USER_PREFIX. Setup makes them through the app's own commands
(create_activity, token_cache_fill); the clean-up removes exactly what carries the tags."""

from __future__ import annotations

import io
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from inventory.models import Product, StockMovement
from orders.models import AnomalyOrder, Order, Payment
from seckill.models import Activity
from seckill.sale.lifecycle import activity_keys_remove, activity_stop_selling

USER_PREFIX = "rehearsal-"
ADMIN_PREFIX = "rehearsal-admin-"
REHEARSAL_PRODUCT = "Rehearsal item (rehearsal data)"
TITLE_PREFIX = "[rehearsal] "
CREATE_BATCH = 2000


@dataclass(frozen=True)
class SaleSpec:
    """What the rehearsal sells and how it lets shoppers in."""

    units: int
    start_in: int  # seconds from now
    length: int = 1800  # seconds the sale lasts
    admission: str = "direct"  # or "room"
    pay_timeout: int = 60  # seconds to pay: short, so that expiries happen within the rehearsal
    room_rate: int = 100
    room_cap: int = 300
    room_window: int = 60


def run_name() -> str:
    return secrets.token_hex(3)


def rehearsal_admin_create(name: str) -> tuple[str, str]:
    """A superuser of this rehearsal only (the verdict reads the admin's live JSON): (username, password)."""
    username, password = f"{ADMIN_PREFIX}{name}", secrets.token_urlsafe(16)
    get_user_model().objects.create_superuser(username, f"{username}@rehearsal.invalid", password)
    return username, password


def shoppers_create(name: str, count: int, tokens_file: Path) -> int:
    """``count`` shoppers (no password: they shop with API tokens) and their tokens, one a line
    in ``tokens_file``; the shared token cache filled with them (token_cache_fill), as before a
    real sale."""
    User = get_user_model()
    keys: list[str] = []
    for first in range(0, count, CREATE_BATCH):
        batch = [
            User(username=f"{USER_PREFIX}{name}-{i:06d}", email="", password="!")  # noqa: S106 - "!": unusable
            for i in range(first, min(count, first + CREATE_BATCH))
        ]
        with transaction.atomic():
            users = User.objects.bulk_create(batch)
            tokens = Token.objects.bulk_create([Token(user=user, key=Token.generate_key()) for user in users])
        keys.extend(token.key for token in tokens)
    tokens_file.parent.mkdir(parents=True, exist_ok=True)
    tokens_file.write_text("".join(f"{key}\n" for key in keys))
    call_command("token_cache_fill", stdout=io.StringIO())
    return len(keys)


def sale_create(name: str, spec: SaleSpec, *, owner: str) -> int:
    """The rehearsal sale through create_activity (warmed): its id."""
    options = {
        "title": f"{TITLE_PREFIX}{name}: {spec.units} units, {spec.admission}",
        "product_name": REHEARSAL_PRODUCT,
        "price": "100.00",
        "seckill_price": "1.00",
        "stock": spec.units,
        "start": f"+{spec.start_in}",
        "end": f"+{spec.start_in + spec.length}",
        "pay_timeout": spec.pay_timeout,
        "admission": spec.admission,
        "admission_rate": spec.room_rate,
        "admission_cap": spec.room_cap,
        "admission_window": spec.room_window,
        "owner": owner,
        "warmup": True,
    }
    out = io.StringIO()
    call_command("create_activity", stdout=out, **options)
    return int(json.loads(out.getvalue().strip().splitlines()[-1])["id"])


def rehearsal_activities():
    """Only the tagged sales: the rehearsal product's, with the rehearsal title."""
    return Activity.objects.filter(product__name=REHEARSAL_PRODUCT, title__startswith=TITLE_PREFIX)


def clean() -> dict[str, int]:
    """Remove every rehearsal sale (its Redis keys closed first), its orders and payments, and
    every rehearsal account. Nothing else: a sale is touched only when it carries both tags."""
    removed = {"sales": 0, "orders": 0, "accounts": 0}
    User = get_user_model()
    for activity_id, start_at in list(rehearsal_activities().values_list("pk", "start_at")):
        # Ended now if it started (web processes refuse within their cache lifetime), then its
        # stock, logs and room out of Redis: every row of the sale goes next, nothing is kept.
        if start_at < timezone.now():
            activity_stop_selling(activity_id=activity_id)
        activity_keys_remove(activity_id=activity_id)
        with transaction.atomic():
            orders = Order.objects.filter(activity_id=activity_id)
            AnomalyOrder.objects.filter(activity_id=activity_id).delete()
            Payment.objects.filter(order__in=orders).delete()
            StockMovement.objects.filter(activity_id=activity_id).delete()  # the sale's stock ledger
            removed["orders"] += orders.delete()[0]
            Activity.objects.filter(pk=activity_id).delete()
        removed["sales"] += 1
    accounts = User.objects.filter(username__startswith=USER_PREFIX)
    with transaction.atomic():
        # Anything a rehearsal account made elsewhere (its orders of a real sale would be a
        # rehearsal bug; they go with the account rather than block the clean-up).
        removed["accounts"] = accounts.count()
        Token.objects.filter(user__in=accounts).delete()
        accounts.delete()
    Product.objects.filter(name=REHEARSAL_PRODUCT, activities__isnull=True).delete()
    return removed
