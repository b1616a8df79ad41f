"""Warm-up (command, beat) and the operator commands: create_activity, reconcile, seed_demo.

The re-warm after Redis lost the stock mid-sale is checked end to end: nobody buys
twice, nothing is oversold, the identities hold.
"""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db.models import Sum
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from inventory.models import Product, SeckillStock
from orders.models import AnomalyOrder, Order
from orders.services.creation import orders_create_from_reservations
from seckill.models import Activity
from seckill.sale.activities import activity_token_ensure
from seckill.sale.lifecycle import WarmupResult
from seckill.sale.reconciliation import REPORT_CONTRACT_KEYS, reconcile
from seckill.sale.replay import reservations_drain
from seckill.sale.selectors import redis_remaining
from seckill.tasks import activities_autowarm_task
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending

from ..factories import make_activity, make_users, token_of
from ..helpers import shopping_while_rewarming

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def redis_state(activity_id: int) -> dict:
    keys, client = ActivityKeys(activity_id), stock_redis()
    stock, loaded = client.mget([keys.stock, keys.loaded])
    return {
        "stock": None if stock is None else int(stock),
        "loaded": None if loaded is None else int(loaded),
        "users": {int(k): v.decode() for k, v in client.hgetall(keys.users).items()},
        "log": client.xlen(keys.log),
    }


def buy(user, activity) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_of(user)}")
    token = activity_token_ensure(activity_id=activity.pk)
    return client.post(f"/api/activities/{activity.pk}/purchase", {"token": token}, format="json").status_code


# --- the warmup command --------------------------------------------------------------


def test_warmup_loads_total_less_safety_and_reads_it_back():
    activity = make_activity(stock=100, safety_stock=7, started=False, warm=False)
    assert redis_state(activity.pk)["stock"] is None
    result = json.loads(run("warmup", str(activity.pk)))
    assert result["remaining"] == result["loaded"] == 93
    assert (result["db_total"], result["db_available"]) == (100, 100)
    assert redis_state(activity.pk) == {"stock": 93, "loaded": 93, "users": {}, "log": 0}
    activity.refresh_from_db()
    assert activity.status == Activity.Status.WARMED and activity.warmed_at is not None
    report = reconcile(activity_id=activity.pk)
    assert report["identity_ok"] and report["redis_loaded"] == 93


def test_warmup_before_the_start_may_run_again():
    activity = make_activity(stock=10, started=False)
    stock_redis().set(ActivityKeys(activity.pk).stock, 3)  # whatever was there is replaced
    assert json.loads(run("warmup", str(activity.pk)))["remaining"] == 10
    assert redis_state(activity.pk)["stock"] == 10


def test_warmup_refuses_a_live_activitys_stock_without_force():
    activity = make_activity(stock=10)
    (user,) = make_users(1)
    assert buy(user, activity) == 202
    before = redis_state(activity.pk)
    with pytest.raises(CommandError, match="--force"):
        run("warmup", str(activity.pk))
    assert redis_state(activity.pk) == before


def test_warmup_errors_are_command_errors():
    with pytest.raises(CommandError, match="no activity 424242"):
        run("warmup", "424242")
    ended = make_activity(stock=5)
    Activity.objects.filter(pk=ended.pk).update(status=Activity.Status.ENDED)
    with pytest.raises(CommandError, match="ended"):
        run("warmup", str(ended.pk))


def test_forced_warmup_derives_from_the_database_and_the_unordered_log():
    activity = make_activity(stock=10, safety_stock=2)
    users = make_users(5)
    for user in users[:3]:
        assert buy(user, activity) == 202
    # Two of the three reservations became orders; one is still in the log.
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk)[:2])
    stock_redis().set(ActivityKeys(activity.pk).stock, 999)  # Redis drifted: force must not trust it
    result = json.loads(run("warmup", str(activity.pk), "--force"))
    # database available 8 - safety 2 - unordered 1
    assert result["remaining"] == 5 and result["unordered_units"] == 1 and result["participants"] == 3
    state = redis_state(activity.pk)
    assert (state["stock"], state["loaded"], state["log"]) == (5, 8, 1)
    assert set(state["users"]) == {u.pk for u in users[:3]}
    assert reconcile(activity_id=activity.pk)["identity_ok"]


@pytest.mark.parametrize("how", ["command", "beat"])
def test_redis_restarted_empty_mid_sale_rewarm_never_oversells(how):
    activity = make_activity(stock=10)
    users = make_users(30)
    early, late = users[:6], users[6:]
    for user in early:
        assert buy(user, activity) == 202
    # Four reservations became orders, two are still in the log.
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk)[:4])

    # Redis restarted empty (the log survived in its append-only file): the stock keys
    # and the participants are gone.
    keys = ActivityKeys(activity.pk)
    stock_redis().delete(keys.stock, keys.loaded, keys.users)
    assert buy(late[0], activity) == 503  # busy, never sold out
    assert buy(early[0], activity) == 503

    if how == "command":
        result = json.loads(run("warmup", str(activity.pk)))  # no stock to overwrite: no --force needed
        assert result["remaining"] == 4 and result["participants"] == 6
    else:
        activities_autowarm_task()
        assert redis_remaining(activity.pk) == 4

    # Everyone who bought before is still a participant.
    for user in early:
        assert buy(user, activity) == 409
    statuses = [buy(user, activity) for user in late]
    assert statuses.count(202) == 4 and statuses.count(410) == len(late) - 4

    reservations_drain(activity_id=activity.pk)
    orders = Order.objects.filter(activity=activity)
    assert orders.aggregate(u=Sum("quantity"))["u"] == 10 and orders.count() == 10
    assert orders.values("user").distinct().count() == 10
    assert SeckillStock.objects.get(activity=activity).available == 0
    assert redis_remaining(activity.pk) == 0
    assert not AnomalyOrder.objects.exists()
    assert reconcile(activity_id=activity.pk)["identity_ok"]


def test_forced_rewarm_during_a_live_sale_never_oversells():
    """Re-warms (operator --force) racing real purchases from many threads: each
    derivation is compare-and-set against the stock it was made from."""
    activity = make_activity(stock=40)
    users = make_users(120)
    token = activity_token_ensure(activity_id=activity.pk)
    keys = {u.pk: token_of(u) for u in users}

    def shop(chunk):
        client = APIClient()
        for user in chunk:
            client.credentials(HTTP_AUTHORIZATION=f"Token {keys[user.pk]}")
            url = f"/api/activities/{activity.pk}/purchase"
            status = client.post(url, {"token": token}, format="json").status_code
            assert status in (202, 410), status

    rewarms = shopping_while_rewarming(activity.pk, shop, [users[i::6] for i in range(6)], timeout=120)
    assert isinstance(rewarms[-1], WarmupResult)

    reservations_drain(activity_id=activity.pk)
    orders = Order.objects.filter(activity=activity)
    assert orders.aggregate(u=Sum("quantity"))["u"] == 40
    assert redis_remaining(activity.pk) == 0
    assert SeckillStock.objects.get(activity=activity).available == 0
    assert not AnomalyOrder.objects.exists()  # the database guard never had to say no
    assert reconcile(activity_id=activity.pk)["identity_ok"]


def test_redis_flushed_completely_after_the_orders_were_made():
    """Nothing survives in Redis: the database alone says what is left and who bought."""
    activity = make_activity(stock=5)
    users = make_users(8)
    for user in users[:3]:
        assert buy(user, activity) == 202
    reservations_drain(activity_id=activity.pk)
    stock_redis().flushdb()
    result = json.loads(run("warmup", str(activity.pk)))
    assert result["remaining"] == 2 and result["participants"] == 3
    assert buy(users[0], activity) == 409
    assert [buy(u, activity) for u in users[3:]] == [202, 202, 410, 410, 410]


# --- create_activity ---------------------------------------------------------------------


def test_create_activity_with_relative_times_prints_its_id():
    before = timezone.now()
    out = run(
        "create_activity",
        "--title",
        "Flash",
        "--product-name",
        "Widget",
        "--price",
        "99.00",
        "--seckill-price",
        "0.10",
        "--stock",
        "50",
        "--start",
        "+60",
        "--end",
        "+3600",
        "--per-user-limit",
        "2",
        "--safety-stock",
        "5",
        "--pay-timeout",
        "300",
    )
    activity = Activity.objects.get(pk=json.loads(out)["id"])
    assert activity.start_at - before >= timedelta(seconds=59)
    assert activity.end_at - activity.start_at == timedelta(seconds=3540)
    assert (activity.total_stock, activity.per_user_limit, activity.safety_stock, activity.pay_timeout) == (
        50,
        2,
        5,
        300,
    )
    assert SeckillStock.objects.get(activity=activity).available == 50
    assert redis_remaining(activity.pk) is None  # no --warmup


def test_create_activity_with_iso_times_and_warmup():
    out = run(
        "create_activity",
        "--title=ISO",
        "--product-name=Gadget",
        "--price=10",
        "--seckill-price=1",
        "--stock=8",
        "--start=2030-01-01T20:00:00+08:00",
        "--end=2030-01-01T21:00:00+08:00",
        "--safety-stock=3",
        "--warmup",
    )
    data = json.loads(out)
    activity = Activity.objects.get(pk=data["id"])
    assert activity.start_at.isoformat() == "2030-01-01T12:00:00+00:00"
    assert data["warmup"]["remaining"] == 5 and redis_remaining(activity.pk) == 5


def test_create_activity_owner_is_the_merchant_named():
    merchant = get_user_model().objects.create_user("shop-owner", password="pw", is_staff=True)
    out = run("create_activity", *(f"{k}={v}" for k, v in BASE_ARGS.items()), "--owner=shop-owner")
    assert Activity.objects.get(pk=json.loads(out)["id"]).owner == merchant
    out = run("create_activity", *(f"{k}={v}" for k, v in BASE_ARGS.items()))
    assert Activity.objects.get(pk=json.loads(out)["id"]).owner is None  # seen by staff who see every sale


BASE_ARGS = {
    "--title": "T",
    "--product-name": "P",
    "--price": "9.99",
    "--seckill-price": "0.99",
    "--stock": "10",
    "--start": "+10",
    "--end": "+100",
}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"--stock": "0"}, "--stock must be at least 1"),
        ({"--price": "abc"}, "--price 'abc' is not an amount"),
        ({"--price": "NaN"}, "non-negative number"),
        ({"--seckill-price": "-1"}, "non-negative number"),
        ({"--price": "1e20"}, "digits"),
        ({"--start": "tomorrow"}, "ISO-8601"),
        ({"--start": "+abc"}, "+SECONDS"),
        ({"--start": "+inf"}, "+SECONDS"),
        ({"--end": "+1e30"}, "+SECONDS"),
        ({"--end": "+5"}, "must be after --start"),
        ({"--safety-stock": "11"}, "safety"),
        ({"--per-user-limit": "0"}, "per"),
        ({"--shards": "0"}, "shards"),
        ({"--pay-timeout": "-1"}, "pay_timeout"),
        ({"--owner": "nobody"}, "--owner 'nobody': no account"),
        ({"--owner": "a-shopper"}, "not a staff account"),
    ],
)
def test_create_activity_bad_arguments_are_helpful_errors_and_write_nothing(override, message):
    get_user_model().objects.create_user("a-shopper", password="pw")
    args = [f"{k}={v}" for k, v in {**BASE_ARGS, **override}.items()]
    with pytest.raises(CommandError) as excinfo:
        run("create_activity", *args)
    assert message.lower() in str(excinfo.value).lower(), str(excinfo.value)
    assert not Activity.objects.exists() and not Product.objects.exists()


# --- reconcile --json and seed_demo ----------------------------------------------------


def test_reconcile_json_has_the_keys_of_the_contract():
    activity = make_activity(stock=10)
    make_activity(stock=3, started=False)  # not live: not in the list
    users = make_users(3)
    for user in users:
        assert buy(user, activity) == 202
    orders_create_from_reservations(activity_id=activity.pk, entries=reservations_pending(activity_id=activity.pk)[:2])

    report = json.loads(run("reconcile", str(activity.pk), "--json"))
    assert REPORT_CONTRACT_KEYS <= set(report), REPORT_CONTRACT_KEYS - set(report)
    assert report["activity"] == activity.pk and report["identity_ok"] is True
    assert (report["redis_loaded"], report["redis_remaining"], report["reserved_not_ordered"]) == (10, 7, 1)
    assert (report["db_total"], report["db_available"], report["units_pending"]) == (10, 8, 2)
    assert report["buckets"]["reserved_not_ordered"] == 1

    reports = json.loads(run("reconcile", "--json"))
    assert isinstance(reports, list) and [r["activity"] for r in reports] == [activity.pk]
    with pytest.raises(CommandError, match="no activity"):
        run("reconcile", "987654", "--json")
    # The human form says the same in a line.
    assert "OK" in run("reconcile", str(activity.pk))


def test_seed_demo_is_idempotent():
    first = run("seed_demo")
    assert "admin account: admin / " in first
    User = get_user_model()
    counts = (User.objects.count(), Activity.objects.count(), Product.objects.count(), Token.objects.count())
    admin_password = User.objects.get(username="admin").password
    second = run("seed_demo")
    assert "admin account" not in second  # the password is shown once
    assert counts == (User.objects.count(), Activity.objects.count(), Product.objects.count(), Token.objects.count())
    assert User.objects.get(username="admin").password == admin_password
    # One activity running (warmed, token on request), one starting in about a minute.
    phases = sorted(a.phase for a in Activity.objects.all())
    assert phases == ["live", "upcoming"]
    for activity in Activity.objects.all():
        assert redis_remaining(activity.pk) == activity.redis_loaded_units  # the database reserve stays out
    shopper = User.objects.get(username="alice")
    assert Token.objects.filter(user=shopper).exists()
    live = next(a for a in Activity.objects.all() if a.phase == "live")
    assert buy(shopper, live) == 202


def test_seed_demo_makes_the_demo_merchant_the_owner_of_the_demo_sales():
    run("seed_demo")
    merchant = get_user_model().objects.get(username="merchant")
    assert [a.owner for a in Activity.objects.all()] == [merchant, merchant]
    Activity.objects.update(owner=None)  # sales seeded before sales had owners
    run("seed_demo")
    assert [a.owner for a in Activity.objects.all()] == [merchant, merchant]
