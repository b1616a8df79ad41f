"""Measure the order lifecycle on this machine: order creation, the deadline sweeper,
reconciliation, and closing an activity with a large Redis state.

    .venv/bin/python -m bench.lifecycle_measure [--orders 20000] [--participants 1000000]

Runs against the local (embedded) PostgreSQL and Redis, with `config.settings.local`; it
creates one activity of its own and leaves its rows behind (its Redis keys are removed).
"""

import argparse
import os
import time
from datetime import timedelta
from decimal import Decimal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--participants", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from devtools import embedded

    os.environ.update(embedded.ensure_services())
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from inventory.models import Product
    from orders.services.creation import orders_create_from_reservations
    from orders.services.lifecycle import orders_expire_overdue
    from seckill.sale.activities import activity_create
    from seckill.sale.lifecycle import activity_close, activity_stop_selling, activity_warmup
    from seckill.sale.reconciliation import reconcile
    from stock.keys import ActivityKeys
    from stock.redis_client import stock_redis
    from stock.reservations import reservations_pending
    from stock.scripts import run_purchase

    call_command("migrate", "--noinput", "-v", "0")
    n = args.orders
    now = timezone.now()
    product, _ = Product.objects.get_or_create(name="lifecycle-measure", defaults={"list_price": Decimal("1.00")})
    activity = activity_create(
        title="lifecycle measure",
        product=product,
        seckill_price=Decimal("0.10"),
        start_at=now - timedelta(seconds=1),
        end_at=now + timedelta(hours=1),
        total_stock=n,
        pay_timeout=1,
        db_reserve=0,  # every unit through Redis: the path measured
    )
    activity_warmup(activity_id=activity.pk)
    User = get_user_model()
    stamp = int(time.time())
    User.objects.bulk_create([User(username=f"lm{stamp}-{i}") for i in range(n)], batch_size=2000)
    user_ids = list(User.objects.filter(username__startswith=f"lm{stamp}-").values_list("pk", flat=True))
    client, keys = stock_redis(), ActivityKeys(activity.pk)
    for uid in user_ids:
        run_purchase(client, keys, user_id=uid, quantity=1, limit=1)

    def timed(label: str, fn):
        started = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - started
        print(f"{label}: {elapsed:.2f} s ({result})", flush=True)
        return result

    def create_all():
        created = 0
        while batch := reservations_pending(activity_id=activity.pk, count=500):
            created += len(orders_create_from_reservations(activity_id=activity.pk, entries=batch).created)
        return f"{created} orders"

    timed(f"create {n} orders in batches of 500 (deadline tasks scheduled)", create_all)
    time.sleep(1.5)  # let the 1 s deadlines pass
    timed(f"sweep {n} overdue orders", lambda: f"{orders_expire_overdue()} cancelled")
    timed(
        "reconcile (dry run), returned set complete",
        lambda: reconcile(activity_id=activity.pk, dry_run=True)["identity_ok"],
    )
    client.delete(keys.returned)
    timed(
        f"reconcile (dry run), {n} cancelled orders looked up in Redis",
        lambda: reconcile(activity_id=activity.pk, dry_run=True)["buckets"]["cancelled_not_returned"],
    )
    activity_warmup(activity_id=activity.pk, force=True)  # re-derive Redis from the database after that
    for start in range(0, args.participants, 50_000):
        client.hset(keys.users, mapping={f"x{i}": "0-1" for i in range(start, start + 50_000)})
    activity_stop_selling(activity_id=activity.pk)
    time.sleep(2.5)  # one activity-cache lifetime and a second
    timed(
        f"close: final reconciliation, then UNLINK with a {args.participants}-field hash",
        lambda: activity_close(activity_id=activity.pk)["keys_removed"],
    )
    print("keys left:", client.keys(f"*{keys.tag}*"))


if __name__ == "__main__":
    main()
