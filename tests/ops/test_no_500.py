"""No request gets a 500 while a dependency is away (API.md).

Redis away: Django's test client against a Redis that is really unreachable (the stock
and the cache Redis both point at a port nothing listens on), every JSON endpoint and
page. The database away for the web tier: a real gunicorn, Celery worker and beat reach
PostgreSQL through a TCP proxy the test cuts.
"""

import re
import urllib.error
import urllib.request

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Sum
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from inventory.models import SeckillStock
from orders.models import DB_PATH_PREFIX, Order
from orders.services.creation import order_create_direct
from seckill.models import Activity, BlacklistEntry, ShopperProfile
from seckill.purchase.shoppers import blacklist_entry_save, shopper_profile_save
from seckill.sale.activities import activity_token_ensure
from seckill.sale.snapshot import activity_snapshot_forget
from stock.keys import ActivityKeys
from stock.redis_client import reset_stock_redis

from ..drills.infra import TcpProxy, assert_nothing_lost_nothing_doubled, start_celery_beat, units_ordered
from ..factories import make_activity, make_users
from ..helpers import free_port, http, start_celery_worker, start_gunicorn, subprocess_env, wait_until
from ..orders.addresses import give_address

# --- Redis away --------------------------------------------------------------------------


@pytest.fixture
def production_caches(settings):
    """The copies in Redis and the rate limit as in production (the test settings turn
    them off), so the reads that fall back to the database really meet the dead Redis."""
    settings.SECKILL_ACTIVITY_REDIS_TTL = 60.0
    settings.SECKILL_BLACKLIST_CACHE_TTL = 2.0
    settings.SECKILL_BLACKLIST_REDIS_TTL = 60.0
    settings.SECKILL_SHOPPER_CACHE_TTL = 60
    settings.SECKILL_RATE_PER_USER = "100/s"


def cut_redis(settings) -> None:
    """Stock and cache Redis both at a port nothing listens on (pytest-django's settings
    fixture puts them back; Django drops its cache connections on the change)."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings.SECKILL_REDIS_URL = dead
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": dead}}
    reset_stock_redis()


def gated(activity, **fields):
    Activity.objects.filter(pk=activity.pk).update(**fields)
    activity_snapshot_forget(activity.pk)
    return activity


def token_client(user) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user=user).key}")
    return client


def session_client(user=None) -> Client:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


def answer(response) -> tuple[int, str | None]:
    code = response.json().get("code") if response["Content-Type"].startswith("application/json") else None
    if response.status_code == 503:
        assert response["Retry-After"] == "2", "busy without Retry-After"
    return response.status_code, code


def redis_state(client: redis.Redis, activity) -> tuple:
    keys = ActivityKeys(activity.pk)
    captchas = list(client.scan_iter(match=f"seckill:{keys.tag}:captcha:*"))
    return client.get(keys.stock), client.xlen(keys.log), client.hlen(keys.users), captchas


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("breaker", ["closed", "open"])
def test_redis_away_every_endpoint_and_page_answers_without_a_500(production_caches, settings, breaker):
    """closed: Redis just died and every call meets it; open: the breaker opened (one
    purchase failed) and the calls skip Redis, the purchase taking the database path."""
    settings.SECKILL_BREAKER_FAILURES = 10**6 if breaker == "closed" else 1
    plain = make_activity(stock=10, db_reserve=5)
    members = gated(make_activity(stock=10, db_reserve=5), min_member_level=2)
    guarded = gated(make_activity(stock=10, db_reserve=5), captcha_required=True)
    history = make_activity(stock=10, db_reserve=5)  # the orders the order endpoints work on
    sale = [plain, members, guarded]
    tokens = {a.pk: activity_token_ensure(activity_id=a.pk) for a in sale}
    opener, buyer, session_buyer, nobody, member, low, banned, payer, canceller = make_users(9)
    shopper_profile_save(profile=ShopperProfile(user=member, member_level=3))
    shopper_profile_save(profile=ShopperProfile(user=low, member_level=0))
    blacklist_entry_save(entry=BlacklistEntry(kind="user", value=str(banned.pk), reason="bot"))
    paid = order_create_direct(activity_id=history.pk, user_id=payer.pk, quantity=1)
    give_address(payer)  # the pay step asks for it first
    cancelled = order_create_direct(activity_id=history.pk, user_id=canceller.pk, quantity=1)
    staff = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw")
    live_redis = redis.Redis.from_url(settings.SECKILL_REDIS_URL)
    redis_before = {a.pk: redis_state(live_redis, a) for a in sale}
    orders_before = set(Order.objects.values_list("pk", "status"))

    cut_redis(settings)
    database_path = set()  # shoppers the database path sold to (open breaker only)
    if breaker == "open":
        response = token_client(opener).post(
            f"/api/activities/{plain.pk}/purchase", {"token": tokens[plain.pk]}, format="json"
        )
        assert answer(response) == (202, "queued"), "the failure that opens the breaker takes the database path"
        database_path.add(opener.pk)
    sold = (202, "queued") if breaker == "open" else (503, "busy")

    def buy(user, activity, **extra):
        body = {"token": tokens[activity.pk], **extra}
        return answer(token_client(user).post(f"/api/activities/{activity.pk}/purchase", body, format="json"))

    assert buy(buyer, plain) == sold
    assert buy(banned, plain) == (403, "blacklisted"), "the blacklist is read from the database"
    assert buy(low, members) == (403, "not_eligible"), "eligibility is read from the database"
    assert buy(member, members) == sold
    assert buy(buyer, guarded) == (403, "captcha_required")
    assert buy(buyer, guarded, captcha_id="x" * 24, captcha_answer="12") == (503, "busy"), "unchecked captcha"
    if breaker == "open":
        database_path |= {buyer.pk, member.pk}
    # A browser's purchase goes through DRF (session and CSRF) rather than the fast path.
    session_purchase = session_client(session_buyer).post(
        f"/api/activities/{plain.pk}/purchase", {"token": tokens[plain.pk]}, content_type="application/json"
    )
    assert answer(session_purchase) == sold
    if breaker == "open":
        database_path.add(session_buyer.pk)
    not_json = token_client(buyer).post(f"/api/activities/{plain.pk}/purchase", "x", content_type="text/plain")
    assert answer(not_json) == (415, "unsupported_media_type")

    anonymous = APIClient(raise_request_exception=False)
    listed = anonymous.get("/api/activities/")
    assert listed.status_code == 200
    assert {a["id"]: a["remaining"] for a in listed.json()["results"]} == {a.pk: None for a in [*sale, history]}
    detail = anonymous.get(f"/api/activities/{plain.pk}/")
    assert detail.status_code == 200 and detail.json()["remaining"] is None
    assert answer(anonymous.get("/api/activities/999999/")) == (404, "not_found")
    flag = anonymous.get(f"/api/activities/{plain.pk}/flag")
    assert flag.status_code == 200 and flag.json()["token"] == tokens[plain.pk]
    assert answer(token_client(buyer).post(f"/api/activities/{guarded.pk}/captcha")) == (503, "busy")
    assert answer(token_client(nobody).get(f"/api/activities/{plain.pk}/result")) == (503, "busy")
    result = token_client(payer).get(f"/api/activities/{history.pk}/result")
    assert result.status_code == 200 and result.json()["order"]["order_no"] == paid.order_no
    orders = token_client(payer).get("/api/orders/")
    assert orders.status_code == 200 and orders.json()["count"] == 1
    assert token_client(payer).get(f"/api/orders/{paid.order_no}/").status_code == 200
    started = token_client(payer).post(f"/api/orders/{paid.order_no}/pay").json()
    assert started["status"] == "pending", "pay starts a payment; the provider's notification pays"
    done = token_client(payer).post(
        started["payment"]["pay_url"], {"outcome": "succeeded"}, format="json", HTTP_ACCEPT="application/json"
    )
    assert done.json() == {"outcome": "succeeded"}
    cancel = token_client(canceller).post(f"/api/orders/{cancelled.order_no}/cancel")
    assert cancel.json() == {"status": "cancelled"}, "the units go back to Redis later (reconciliation)"
    me = session_client(payer).get("/api/me")
    assert me.status_code == 200 and me.json()["username"] == payer.username
    for path in ("/api/ping", "/api/schema/", "/api/docs/"):
        assert anonymous.get(path).status_code == 200, path
    operator = {"HTTP_AUTHORIZATION": f"Bearer {settings.METRICS_TOKEN}"}
    assert anonymous.get("/metrics", **operator).status_code == 200
    health = anonymous.get("/healthz", **operator)
    assert health.status_code == 503 and health.json()["status"] == "degraded"
    assert health.json()["redis"]["status"] == "down"

    browser, admin = session_client(payer), session_client(staff)
    home = browser.get("/")
    assert home.status_code == 200
    assert home.content.decode().count("Stock figure unavailable just now") == 4, "every live sale: figure unknown"
    for path in (
        f"/seckill/{plain.pk}/",
        f"/seckill/{plain.pk}/flag.js",
        "/products/",
        f"/products/{plain.product_id}/",
        "/orders/",
    ):
        assert browser.get(path).status_code == 200, path
    for path in ("/accounts/login/", "/accounts/signup/"):
        assert session_client().get(path).status_code == 200, path
    for path in ("/admin/", "/admin/seckill/activity/"):
        assert admin.get(path).status_code == 200, path

    # Nothing happened that no answer said: no reservation, no captcha, no participant in
    # Redis; orders only for the database path's 202s, and the two order calls' changes.
    assert {a.pk: redis_state(live_redis, a) for a in sale} == redis_before
    new = Order.objects.exclude(pk__in={pk for pk, _ in orders_before})
    assert set(new.values_list("user_id", flat=True)) == database_path
    assert all(o.reservation_id.startswith(DB_PATH_PREFIX) for o in new)
    changed = set(Order.objects.filter(pk__in={pk for pk, _ in orders_before}).values_list("pk", "status"))
    assert changed == (orders_before - {(paid.pk, "pending"), (cancelled.pk, "pending")}) | {
        (paid.pk, "paid"),
        (cancelled.pk, "cancelled"),
    }
    available = dict(SeckillStock.objects.filter(activity__in=sale).values_list("activity_id", "available"))
    sold_units = new.values("activity_id").annotate(u=Sum("quantity"))
    assert available == {a.pk: 10 - next((s["u"] for s in sold_units if s["activity_id"] == a.pk), 0) for a in sale}


# --- the database away for the web tier --------------------------------------------------


def _purchase(base: str, activity_id: int, key: str, token: str) -> tuple[int, str]:
    status, body, headers = http(
        base, "POST", f"/api/activities/{activity_id}/purchase", key=key, body={"token": token}
    )
    if status == 503:
        assert headers.get("Retry-After") == "2", headers
    return status, body["code"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_database_away_from_the_web_tier_known_shoppers_buy_through_redis(process_logs):
    """Web, worker and beat reach PostgreSQL through a proxy that is cut: a shopper the
    web process knows (token cached) buys through Redis (202), one it does not know gets
    503 busy, nothing is a 500, and once the database is back every 202 is one order."""
    proxy = TcpProxy(int(connection.settings_dict["PORT"]), free_port()).start()
    db = connection.settings_dict
    env = subprocess_env(
        DATABASE_URL=f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}",
        SECKILL_TOKEN_CACHE_TTL="600",  # the known shoppers stay known for the whole test
        SECKILL_REPLAY_INTERVAL="1",
        SECKILL_AUTOWARM_INTERVAL="2",
    )
    # One web process: "known to the process" is then known to the server. The test
    # settings keep no activity or blacklist copy (TTL 0): while the database is away the
    # process serves the copies it last read, the hardest case.
    web, base = start_gunicorn(process_logs, workers=1, threads=8, env=env)
    started = [web, start_celery_worker(process_logs, env=env), start_celery_beat(process_logs, env=env)]
    try:
        activity = make_activity(stock=30)
        token = activity_token_ensure(activity_id=activity.pk)
        users = make_users(25)
        keys = dict(Token.objects.filter(user__in=users).values_list("user_id", "key"))
        early, known, unknown = users[:5], users[5:15], users[15:]
        answers = {u.pk: _purchase(base, activity.pk, keys[u.pk], token) for u in early}
        assert set(answers.values()) == {(202, "queued")}
        for user in known:  # any authenticated call makes the process remember the token
            assert http(base, "GET", f"/api/activities/{activity.pk}/result", key=keys[user.pk])[0] == 200
        browser = Client()
        browser.force_login(known[0])  # a session in the database and the cache Redis
        session = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
        assert http(base, "GET", "/api/me", headers=session)[1]["username"] == known[0].username
        wait_until(lambda: units_ordered(activity) == 5, timeout=120, what="orders before the cut")

        proxy.cut()
        during_known = {u.pk: _purchase(base, activity.pk, keys[u.pk], token) for u in known}
        assert set(during_known.values()) == {(202, "queued")}, during_known
        during_unknown = {u.pk: _purchase(base, activity.pk, keys[u.pk], token) for u in unknown}
        assert set(during_unknown.values()) == {(503, "busy")}, during_unknown
        answers |= during_known
        # Everything else that needs the database says busy; nothing is a 500.
        key = keys[known[0].pk]
        for method, path in [
            ("GET", "/api/activities/"),
            ("GET", f"/api/activities/{activity.pk}/"),
            ("GET", f"/api/activities/{activity.pk}/result"),
            ("GET", "/api/orders/"),
            ("GET", "/api/orders/nope/"),
            ("POST", "/api/orders/nope/pay"),
        ]:
            status, body, headers = http(base, method, path, key=key)
            assert (status, body["code"], headers.get("Retry-After")) == (503, "busy", "2"), (path, status, body)
        # The session (in the cache Redis) names a user the process remembers: no query.
        status, body, _ = http(base, "GET", "/api/me", headers=session)
        assert (status, body["username"]) == (200, known[0].username), body
        # Pages that need the database answer 503 too (seckill.middleware.DatabaseAwayMiddleware).
        for path in ["/orders/", f"/seckill/{activity.pk + 1000}/", "/products/"]:
            request = urllib.request.Request(f"{base}{path}", headers=session)
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    page = (response.status, response.headers.get("Retry-After"))
            except urllib.error.HTTPError as exc:
                page = (exc.code, exc.headers.get("Retry-After"))
            assert page == (503, "2"), (path, page)
        operator = {"Authorization": f"Bearer {settings.METRICS_TOKEN}"}
        status, body, _ = http(base, "GET", "/healthz", headers=operator)
        assert status == 503 and body["database"]["status"] == "down", body
        assert http(base, "GET", "/healthz")[:2] == (503, {"status": "degraded"})
        with urllib.request.urlopen(
            urllib.request.Request(f"{base}/metrics", headers=operator), timeout=60
        ) as response:
            assert response.status == 200
        flag = http(base, "GET", f"/api/activities/{activity.pk}/flag")
        assert flag[0] == 200 and flag[1]["token"] == token, "the flag comes from the process's last copy"
        assert units_ordered(activity) == 5, "no order can be written while the database is away"

        proxy.restore()
        wait_until(lambda: units_ordered(activity) == 15, timeout=120, what="the orders once the database is back")
        # busy left nothing behind: the shoppers turned away buy now, once each.
        after = {u.pk: _purchase(base, activity.pk, keys[u.pk], token) for u in unknown}
        assert set(after.values()) == {(202, "queued")}, after
        answers |= after
        assert_nothing_lost_nothing_doubled(activity, answers)
        assert units_ordered(activity) == 25
        assert not re.search(r"Internal Server Error|Traceback", web.log()), web.log()[-3000:]
    finally:
        for process in reversed(started):
            process.stop()
        proxy.stop()
