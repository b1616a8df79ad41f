"""Helpers of the gate tests: many shoppers at once against a real gunicorn, and the stock invariant."""

from concurrent.futures import ThreadPoolExecutor

from django.db.models import Sum
from rest_framework.authtoken.models import Token

from orders.models import AnomalyOrder, Order
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining

from ..helpers import wait_until


def keys_of(users) -> dict[int, str]:
    return dict(Token.objects.filter(user__in=users).values_list("user_id", "key"))


def concurrently(jobs, *, threads: int = 100) -> list:
    """Run callables on many threads at once; their results in order."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda job: job(), jobs))


def assert_stock_invariant(activity, admitted_units: int) -> None:
    """Everything admitted became exactly one order each; Redis and the database agree."""
    wait_until(
        lambda: (Order.objects.filter(activity=activity).aggregate(u=Sum("quantity"))["u"] or 0) >= admitted_units,
        timeout=120,
        what="the orders of the admitted purchases",
    )
    assert (Order.objects.filter(activity=activity).aggregate(u=Sum("quantity"))["u"] or 0) == admitted_units
    assert redis_remaining(activity.pk) == activity.total_stock - admitted_units
    assert not AnomalyOrder.objects.filter(activity=activity).exists()
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"], report
    assert report["reserved_not_ordered"] == 0
