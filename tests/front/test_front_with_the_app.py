"""nginx with the repository's configuration in front of the real gunicorn: the client's
address is the one the app counts, whatever forwarding header the client forges; what the
app marks public is served from nginx's cache for as long as its Cache-Control says (the
activity page for s-maxage, the waiting room's status for about a second) and nothing else
is; the published pages and the static files come from disk; and with gunicorn stopped
nginx answers the contract's busy."""

import json
import re
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from seckill.models import Activity
from seckill.sale.activities import activity_token_ensure

from ..factories import make_activity, make_users, token_of
from ..helpers import BASE_DIR, gate_window_room, start_front, start_gunicorn, subprocess_env, wait_until
from .support import assert_json_error, request

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HASHED_CSS = "front/site.0123456789ab.css"  # collectstatic's manifest name: 12 hex digits
PLAIN_CSS = "front/plain.css"


@pytest.fixture(scope="module")
def static_root():
    """A STATIC_ROOT of this module's own, with files the app does not have: what answers
    them is nginx. Under .local/, where nginx's workers may read (see start_front)."""
    (BASE_DIR / ".local").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="front-static-", dir=BASE_DIR / ".local"))
    root.chmod(0o755)
    (root / "front").mkdir(mode=0o755)
    (root / HASHED_CSS).write_text("body { color: black; }\n")
    (root / PLAIN_CSS).write_text("body { color: gray; }\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def shop(django_db_setup, tmp_path_factory, static_root):
    """gunicorn as make run starts it behind nginx (trusting the X-Forwarded-For nginx
    writes), a per-address purchase limit of 2 an hour, and a page Cache-Control of
    ``max-age=0, s-maxage=300`` (a cache that read max-age would keep nothing); nginx in
    front. One pair for the module: each test makes activities of its own, so no cached
    entry of one test is another's. Yields nginx's base URL."""
    logs = tmp_path_factory.mktemp("front-with-the-app")
    env = subprocess_env(
        SECKILL_TRUSTED_PROXY_HEADER="X-Forwarded-For",
        SECKILL_TRUSTED_PROXY_COUNT="1",
        SECKILL_RATE_PER_IP="2/h",
        SECKILL_PAGE_MAX_AGE="0",
    )
    gunicorn, upstream = start_gunicorn(logs, workers=1, threads=4, env=env)
    front, base = start_front(logs, upstream, static_root=static_root)
    yield front, base
    front.stop()
    gunicorn.stop()


@pytest.fixture
def base(shop):
    return shop[1]


def test_the_app_counts_the_address_nginx_saw_whatever_the_client_forges(base):
    activity = make_activity(stock=10)
    users = make_users(4)
    token = activity_token_ensure(activity_id=activity.pk)
    gate_window_room(3600, at_least_s=30)  # the three purchases in one window of the hourly limit

    def buy(user, source: str, forged: dict[str, str]):
        headers = {"Authorization": f"Token {token_of(user)}", "Content-Type": "application/json", **forged}
        body = json.dumps({"token": token}).encode()
        path = f"/api/activities/{activity.pk}/purchase"
        return request(base, "POST", path, headers=headers, body=body, source=source)

    # Three shoppers on 127.0.0.2, each claiming another address: the limit of 2 counts them as one.
    assert buy(users[0], "127.0.0.2", {"X-Forwarded-For": "198.51.100.1"}).status == 202
    assert buy(users[1], "127.0.0.2", {"X_Forwarded_For": "198.51.100.2"}).status == 202
    limited = buy(users[2], "127.0.0.2", {"X-Forwarded-For": "198.51.100.3", "X_Forwarded_For": "198.51.100.4"})
    assert_json_error(limited, 429, "rate_limited")
    # nginx's own connection to gunicorn comes from 127.0.0.1 for every client: had the app
    # counted that, this shopper on 127.0.0.3 would be limited too.
    assert buy(users[3], "127.0.0.3", {}).status == 202


def test_the_activity_page_is_served_from_nginxs_cache_for_s_maxage(base):
    activity = make_activity(stock=10)
    path = f"/seckill/{activity.pk}/"
    first = request(base, "GET", path)
    assert first.status == 200 and first.headers["x-cache-status"] == "MISS"
    # The app's own headers, passed on: browsers keep it max-age (0 here), shared caches s-maxage.
    assert first.headers["cache-control"] == "public, max-age=0, s-maxage=300"
    assert "set-cookie" not in first.headers

    Activity.objects.filter(pk=activity.pk).update(title="Renamed while cached", updated_at=timezone.now())
    for asked in (path, path + "?bust=1"):  # a query string does not bypass the cache
        again = request(base, "GET", asked)
        assert again.headers["x-cache-status"] == "HIT" and again.body == first.body
    assert b"Renamed while cached" not in again.body
    revalidated = request(base, "GET", path, headers={"If-None-Match": first.headers["etag"]})
    assert revalidated.status == 304 and revalidated.headers["x-cache-status"] == "HIT"

    chinese = f"/zh-hans/seckill/{activity.pk}/"
    assert request(base, "GET", chinese).headers["x-cache-status"] == "MISS"  # its own entry
    assert request(base, "GET", chinese).headers["x-cache-status"] == "HIT"


def test_the_waiting_rooms_status_is_cached_for_about_a_second(base):
    activity = make_activity(stock=10)
    Activity.objects.filter(pk=activity.pk).update(admission_mode=Activity.AdmissionMode.ROOM)
    path = f"/api/activities/{activity.pk}/room"

    def filled_then_hit():
        """A fill and, at once, the same question: the second is the cache's answer. nginx
        keeps max-age=1 for 1 to 2 s (it counts whole seconds): a pair more than 1 s apart
        (a busy machine) proves nothing and is asked again."""
        filled = request(base, "GET", path)
        filled_at = time.monotonic()
        again = request(base, "GET", path)
        if filled.headers.get("x-cache-status") != "MISS" or time.monotonic() - filled_at >= 1:
            return None
        return filled, filled_at, again

    filled, filled_at, again = wait_until(filled_then_hit, timeout=20, what="a fill and a question within 1 s")
    assert filled.status == 200
    assert again.headers["x-cache-status"] == "HIT" and again.body == filled.body
    # Each answer carries its own request id, a cached one too.
    assert again.headers["x-request-id"] != filled.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", again.headers["x-request-id"])

    hits_asked_at = []

    def refreshed():
        asked_at = time.monotonic()
        answer = request(base, "GET", path)
        if answer.headers["x-cache-status"] == "HIT":
            hits_asked_at.append(asked_at)
            return None
        return answer

    fresh = wait_until(refreshed, timeout=10, interval=0.1, what="the status to be asked of the app again")
    assert fresh.headers["x-cache-status"] in ("MISS", "EXPIRED")
    assert fresh.json()["server_time"] != filled.json()["server_time"]
    # No cached answer to a question asked 2 s or more after the fill (a little slack for
    # nginx's clock, updated once per turn of its loop).
    assert all(asked_at - filled_at < 2.2 for asked_at in hits_asked_at), [t - filled_at for t in hits_asked_at]


def test_flag_js_is_never_cached(base):
    activity = make_activity(stock=10)
    path = f"/seckill/{activity.pk}/flag.js?v=1"
    before = request(base, "GET", path)
    assert before.status == 200 and b'"started": true' in before.body
    assert before.headers["cache-control"].startswith("no-store")
    assert "x-cache-status" not in before.headers
    later = timezone.now() + timedelta(hours=1)
    Activity.objects.filter(pk=activity.pk).update(start_at=later, end_at=later + timedelta(hours=1))
    after = request(base, "GET", path)  # the same URL, the new answer
    assert b'"started": false' in after.body


def test_a_published_page_is_served_from_its_file_with_the_apps_headers(base, shop):
    front = shop[0]
    published, other = make_activity(stock=10), make_activity(stock=10)
    for prefix, marker in (("", b"published en"), ("zh-hans/", b"published zh-hans")):
        target = front.publish_root / f"{prefix}seckill/{published.pk}/index.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"<!doctype html><title>" + marker + b"</title>")
    for path in (front.publish_root, *front.publish_root.rglob("*")):  # nginx's workers read them
        path.chmod(0o755 if path.is_dir() else 0o644)

    page = request(base, "GET", f"/seckill/{published.pk}/")
    assert page.status == 200 and page.body.endswith(b"published en</title>")
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-language"] == "en"
    assert "x-cache-status" not in page.headers  # from disk, not through the app
    # The Cache-Control the app gives the page with the default settings.
    assert page.headers["cache-control"] == (
        f"public, max-age={settings.SECKILL_PAGE_MAX_AGE}, s-maxage={settings.SECKILL_PAGE_S_MAXAGE}"
    )
    zh = request(base, "GET", f"/zh-hans/seckill/{published.pk}/")
    assert zh.body.endswith(b"published zh-hans</title>") and zh.headers["content-language"] == "zh-hans"

    # The same security headers as the page the app renders (a page without a file); the
    # policy's directives in any order.
    rendered = request(base, "GET", f"/seckill/{other.pk}/")
    assert rendered.headers["x-cache-status"] == "MISS"
    for name in ("x-frame-options", "x-content-type-options", "referrer-policy", "cross-origin-opener-policy"):
        assert page.headers.get(name) == rendered.headers.get(name), name
    policy = "content-security-policy"
    assert set(page.headers[policy].split("; ")) == set(rendered.headers[policy].split("; "))


def test_static_files_are_served_by_nginx(base):
    hashed = request(base, "GET", f"/static/{HASHED_CSS}")
    assert hashed.status == 200 and hashed.body == b"body { color: black; }\n"
    assert hashed.headers["content-type"] == "text/css"
    assert hashed.headers["cache-control"] == "max-age=315360000"  # a hashed name never changes
    plain = request(base, "GET", f"/static/{PLAIN_CSS}")
    assert plain.body == b"body { color: gray; }\n" and plain.headers["cache-control"] == "max-age=60"
    assert_json_error(request(base, "GET", "/static/front/missing.css"), 404, "not_found")


def test_with_gunicorn_stopped_nginx_answers_busy_and_keeps_serving_what_it_holds(process_logs):
    gunicorn, upstream = start_gunicorn(process_logs, workers=1, threads=2)
    front, base = start_front(process_logs, upstream)
    try:
        activity = make_activity(stock=10)
        page = request(base, "GET", f"/seckill/{activity.pk}/")
        assert page.headers["x-cache-status"] == "MISS"
        gunicorn.stop()

        for method, path in (("GET", "/api/activities/"), ("POST", f"/api/activities/{activity.pk}/purchase")):
            busy = request(base, method, path, body=b"{}" if method == "POST" else None)
            assert_json_error(busy, 503, "busy")
            assert busy.headers["retry-after"] == "2" and busy.headers["cache-control"] == "no-store"
        held = request(base, "GET", f"/seckill/{activity.pk}/")
        assert held.status == 200 and held.body == page.body
    finally:
        front.stop()
        gunicorn.stop()
