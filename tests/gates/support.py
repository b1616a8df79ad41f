"""Helpers of the gate tests: real HTTP against a real gunicorn, and the stock invariant."""

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from django.db.models import Sum
from rest_framework.authtoken.models import Token

from orders.models import AnomalyOrder, Order
from seckill.reconciliation import reconcile
from seckill.selectors import redis_remaining

from ..helpers import wait_until


def http(base: str, method: str, path: str, *, key: str | None = None, body=None, headers: dict | None = None):
    """(status, JSON body, headers); never raises on an HTTP error status."""
    data = json.dumps(body).encode() if body is not None else None
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    if key:
        all_headers["Authorization"] = f"Token {key}"
    request = urllib.request.Request(f"{base}{path}", data=data, headers=all_headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null"), dict(response.headers)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, (json.loads(raw) if raw else None), dict(exc.headers)


def purchase(base: str, activity_id: int, key: str, token: str, *, headers: dict | None = None, **extra):
    return http(
        base,
        "POST",
        f"/api/activities/{activity_id}/purchase",
        key=key,
        body={"token": token, **extra},
        headers=headers,
    )


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
