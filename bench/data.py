"""Bench data, made through the project's own services: shoppers with API tokens, activities."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.authtoken.models import Token

from inventory.models import Product
from seckill.models import Activity
from seckill.sale.activities import activity_create, activity_token_ensure
from seckill.sale.lifecycle import activity_warmup

BATCH = 5000


def shoppers_create(n: int, tokens_file: Path) -> list[int]:
    """n shoppers with API tokens (bulk inserts); writes the tokens one a line, in user
    id order, and returns the user ids in the same order."""
    User = get_user_model()
    start = User.objects.filter(username__startswith="bench").count()
    for i in range(start, n, BATCH):
        users = User.objects.bulk_create(
            [User(username=f"bench{j:07d}", password="!") for j in range(i, min(n, i + BATCH))]
        )
        Token.objects.bulk_create([Token(user=u, key=Token.generate_key()) for u in users])
    rows = list(
        Token.objects.filter(user__username__startswith="bench").order_by("user_id").values_list("user_id", "key")[:n]
    )
    tokens_file.write_text("".join(f"{key}\n" for _, key in rows))
    return [uid for uid, _ in rows]


def activity_new(
    *,
    title: str,
    stock: int,
    warm: bool = True,
    per_user_limit: int = 1,
    shards: int = 1,
    starts_in: timedelta = timedelta(minutes=-1),
    **gates,
) -> Activity:
    """An activity with its purchase token, live (started a minute ago, ends in two hours)
    unless ``starts_in`` is positive (then it has no token yet); ``gates``: Activity fields
    of the traffic gates (rate_per_user, admission_rate, …), set before the warm-up caches
    the activity."""
    now = timezone.now()
    product = Product.objects.create(name=f"{title} product", list_price=Decimal("99.00"))
    activity = activity_create(
        title=title,
        product=product,
        seckill_price=Decimal("1.00"),
        start_at=now + starts_in,
        end_at=now + starts_in + timedelta(hours=2),
        total_stock=stock,
        per_user_limit=per_user_limit,
        shards=shards,
        db_reserve=0,  # every unit through Redis: the path measured
    )
    if gates:
        Activity.objects.filter(pk=activity.pk).update(**gates)
    if warm:
        activity_warmup(activity_id=activity.pk)
    activity_token_ensure(activity_id=activity.pk)
    activity.refresh_from_db()
    return activity
