"""The activity page is one set of bytes per URL for every visitor, cacheable by a CDN,
with validators; the flags are never cached; the token exists nowhere before the start."""

import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from seckill.models import Activity
from seckill.sale.snapshot import activity_snapshot_forget
from tests.factories import UserFactory, make_activity

pytestmark = pytest.mark.django_db


def page_url(activity, language=None):
    return f"/{language}/seckill/{activity.pk}/" if language else f"/seckill/{activity.pk}/"


def logged_in_client(user) -> Client:
    client = Client()
    client.force_login(user)
    client.get("/api/me")  # as the page script does: now it holds a CSRF cookie too
    assert "csrftoken" in client.cookies and "sessionid" in client.cookies
    return client


def assert_shared(response):
    assert response.status_code == 200
    cache_control = response["Cache-Control"]
    assert "public" in cache_control and "max-age=30" in cache_control and "s-maxage=300" in cache_control
    assert response.has_header("ETag") and response.has_header("Last-Modified")
    assert not response.cookies, f"Set-Cookie on a shared page: {response.cookies}"
    assert "Set-Cookie" not in str(response.serialize_headers())
    vary = response.get("Vary", "").lower()
    assert "cookie" not in vary and "accept-language" not in vary


def test_same_bytes_for_anonymous_and_two_logged_in_shoppers():
    activity = make_activity(started=False)
    users = UserFactory(), UserFactory()
    alice, bob = (logged_in_client(u) for u in users)
    anonymous = Client()
    chinese_browser = Client(HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9")
    responses = [c.get(page_url(activity)) for c in (anonymous, alice, bob, chinese_browser)]
    for response in responses:
        assert_shared(response)
    bodies = {r.content for r in responses}
    assert len(bodies) == 1, "the page differs between visitors"
    assert len({r["ETag"] for r in responses}) == 1
    body = responses[0].content.decode()
    assert "csrfmiddlewaretoken" not in body and "csrf_token" not in body
    assert not any(u.username in body for u in users)
    assert responses[0]["Content-Language"] == "en"


def test_chinese_page_has_its_own_url_and_is_shared_too():
    activity = make_activity(started=False)
    responses = [
        Client(HTTP_ACCEPT_LANGUAGE=lang).get(page_url(activity, "zh-hans")) for lang in ("en-US", "zh-CN", "fr")
    ]
    for response in responses:
        assert_shared(response)
    assert len({r.content for r in responses}) == 1
    body = responses[0].content.decode()
    assert '<html lang="zh-Hans" ' in body and "立即抢购" in body  # "Buy now"
    assert responses[0]["Content-Language"] == "zh-hans"
    english = Client().get(page_url(activity)).content.decode()
    assert '<html lang="en" ' in english and "Buy now" in english


def test_conditional_get_answers_304_until_the_page_changes():
    activity = make_activity(started=False)
    client = Client()
    first = client.get(page_url(activity))
    etag, last_modified = first["ETag"], first["Last-Modified"]

    by_etag = client.get(page_url(activity), HTTP_IF_NONE_MATCH=etag)
    assert by_etag.status_code == 304 and by_etag.content == b""
    assert by_etag["ETag"] == etag and "public" in by_etag["Cache-Control"]
    assert not by_etag.cookies

    by_date = client.get(page_url(activity), HTTP_IF_MODIFIED_SINCE=last_modified)
    assert by_date.status_code == 304

    stale = client.get(page_url(activity), HTTP_IF_NONE_MATCH='"something-else"')
    assert stale.status_code == 200 and stale.content == first.content

    activity.title = "A new title"
    activity.save()
    changed = client.get(page_url(activity), HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag and b"A new title" in changed.content

    # A change made without save() (as activity_stop_selling does) is a new page too.
    Activity.objects.filter(pk=activity.pk).update(end_at=activity.end_at + timedelta(minutes=5))
    ended = client.get(page_url(activity), HTTP_IF_NONE_MATCH=changed["ETag"])
    assert ended.status_code == 200 and ended["ETag"] != changed["ETag"]


def test_a_captcha_activity_says_so_in_its_shared_page_and_nothing_more():
    """Whether a captcha is needed is per activity, so it may be in the cached page; the
    challenge itself is per shopper and only ever comes from the captcha API."""
    activity = make_activity()
    before = Client().get(page_url(activity))
    assert b'data-captcha-required="false"' in before.content

    # Turned on without save() (no new updated_at): still a new page at once.
    Activity.objects.filter(pk=activity.pk).update(captcha_required=True)
    shopper = logged_in_client(UserFactory())
    assert shopper.post(f"/api/activities/{activity.pk}/captcha").status_code == 201  # one for this shopper
    responses = [Client().get(page_url(activity)), shopper.get(page_url(activity))]
    for response in responses:
        assert_shared(response)
    assert len({r.content for r in responses}) == 1
    assert responses[0]["ETag"] != before["ETag"]
    body = responses[0].content.decode()
    assert 'data-captcha-required="true"' in body
    assert '<p id="captcha-question" class="captcha-question"></p>' in body  # filled in by the script
    assert '<form id="captcha" class="captcha" hidden>' in body
    assert "captcha_id" not in body
    chinese = Client().get(page_url(activity, "zh-hans")).content.decode()
    assert "安全验证" in chinese and "确认抢购" in chinese  # "Security check", "Confirm and buy"


def test_unknown_activity_is_404_and_other_methods_405():
    assert Client().get("/seckill/999999/").status_code == 404
    activity = make_activity(started=False)
    assert Client().post(page_url(activity)).status_code in (403, 405)  # CSRF first, or not allowed


def flag_from_js(text: str) -> dict:
    match = re.search(r"window\.seckillFlag = (\{.*?\});", text)
    assert match, text
    return json.loads(match.group(1))


def test_flags_are_never_cached_and_no_token_exists_before_the_start():
    # Far enough ahead that a busy machine cannot reach it before the "before" checks; the
    # start is then moved to now rather than waited for.
    start = timezone.now() + timedelta(minutes=10)
    activity = make_activity(started=False, start_at=start, end_at=start + timedelta(hours=1))
    client = Client()
    flag_js = client.get(f"/seckill/{activity.pk}/flag.js?v=abc123")
    flag_json = client.get(f"/api/activities/{activity.pk}/flag?v=def456")
    for response in (flag_js, flag_json):
        assert response.status_code == 200
        assert "no-store" in response["Cache-Control"]
        assert "public" not in response["Cache-Control"]
    assert flag_js["Content-Type"].startswith("application/javascript")
    for flag in (flag_from_js(flag_js.content.decode()), flag_json.json()):
        assert flag["started"] is False and flag["token"] is None and flag["server_time"]
    activity.refresh_from_db()
    assert activity.purchase_token is None  # nowhere: not in the database either

    Activity.objects.filter(pk=activity.pk).update(start_at=timezone.now() - timedelta(seconds=1))
    activity_snapshot_forget(activity.pk)
    page_before = client.get(page_url(activity)).content  # the page shows the start time: after the move
    started = flag_from_js(client.get(f"/seckill/{activity.pk}/flag.js?v=ghi789").content.decode())
    assert started["started"] is True and started["token"]
    assert client.get(f"/api/activities/{activity.pk}/flag").json()["token"] == started["token"]
    page_after = client.get(page_url(activity)).content
    assert page_after == page_before  # the page never carries the token, before or after
    assert started["token"].encode() not in page_after


def test_me_gives_login_state_and_a_csrf_cookie_uncached():
    anonymous = Client().get("/api/me")
    assert anonymous.status_code == 200 and "no-store" in anonymous["Cache-Control"]
    body = anonymous.json()
    assert body["authenticated"] is False and body["csrf_token"] and "csrftoken" in anonymous.cookies
    user = UserFactory()
    client = Client()
    client.force_login(user)
    assert client.get("/api/me").json() | {"csrf_token": None} == {
        "authenticated": True,
        "username": user.username,
        "csrf_token": None,
    }


def test_publish_command_writes_the_served_bytes(tmp_path):
    activity = make_activity(started=False)
    call_command("publish", activity.pk, "--dir", str(tmp_path))
    english = tmp_path / "seckill" / str(activity.pk) / "index.html"
    chinese = tmp_path / "zh-hans" / "seckill" / str(activity.pk) / "index.html"
    assert english.read_bytes() == Client().get(page_url(activity)).content
    assert chinese.read_bytes() == Client().get(page_url(activity, "zh-hans")).content


def test_publish_admin_action(tmp_path, settings, admin_client):
    settings.SECKILL_PUBLISH_DIR = tmp_path
    activity = make_activity(started=False)
    response = admin_client.post(
        "/admin/seckill/activity/", {"action": "publish", "_selected_action": [activity.pk]}, follow=True
    )
    assert response.status_code == 200
    assert (tmp_path / "seckill" / str(activity.pk) / "index.html").read_bytes() == Client().get(
        page_url(activity)
    ).content
    assert Activity.objects.get(pk=activity.pk).purchase_token is None


def test_an_old_format_csrf_cookie_does_not_make_the_page_set_a_cookie():
    """CsrfViewMiddleware replaces a malformed CSRF cookie; on a shared page that cookie
    would be cached and handed to everyone, so none is set there."""
    activity = make_activity(started=False)
    client = Client()
    client.cookies["csrftoken"] = "not-a-valid-token!"
    response = client.get(page_url(activity))
    assert_shared(response)
    assert response.content == Client().get(page_url(activity)).content
    assert "csrftoken" in client.get("/api/me").cookies  # the uncached call fixes it instead


def sell(activity, n: int) -> list:
    """n shoppers each take a unit, and their orders are made (as the drain task does)."""
    from orders.models import Order
    from seckill.purchase.reserve import purchase_reserve
    from seckill.sale.replay import reservations_drain
    from seckill.sale.snapshot import activity_snapshot

    buyers = [UserFactory() for _ in range(n)]
    for buyer in buyers:
        purchase_reserve(activity=activity_snapshot(activity.pk), user_id=buyer.pk, quantity=1)
    reservations_drain(activity_id=activity.pk)
    return list(Order.objects.filter(activity=activity, user__in=buyers))


def flags(activity) -> tuple[dict, dict]:
    """The JSON flag and flag.js's, both read fresh."""
    as_json = Client().get(f"/api/activities/{activity.pk}/flag").json()
    script = Client().get(f"/seckill/{activity.pk}/flag.js").content.decode()
    as_js = json.loads(re.search(r"window\.seckillFlag = (\{.*?\});", script).group(1))
    return as_json, as_js


def test_the_flag_says_what_is_left_and_when_it_is_sold_out_and_when_units_come_back(
    django_capture_on_commit_callbacks,
):
    from orders.services.lifecycle import order_cancel

    activity = make_activity(stock=2)
    for flag in flags(activity):
        assert (flag["remaining"], flag["sold_out"]) == (2, False)
    orders = sell(activity, 2)
    for flag in flags(activity):
        assert (flag["remaining"], flag["sold_out"]) == (0, True)
        assert flag["started"] and not flag["ended"]
    with django_capture_on_commit_callbacks(execute=True):  # the units go back to Redis after the commit
        order_cancel(order=orders[0], reason="shopper")
    for flag in flags(activity):
        assert (flag["remaining"], flag["sold_out"]) == (1, False)


def test_the_flag_of_an_activity_not_warmed_knows_no_figure():
    activity = make_activity(started=False, warm=False)
    for flag in flags(activity):
        assert (flag["remaining"], flag["sold_out"]) == (None, False)


def test_the_page_shows_the_shops_local_times(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    start = timezone.now().replace(microsecond=0) + timedelta(hours=1)
    activity = make_activity(started=False, start_at=start, end_at=start + timedelta(hours=2))
    body = Client().get(page_url(activity)).content.decode()
    local = timezone.localtime(start, timezone=__import__("zoneinfo").ZoneInfo("Asia/Shanghai"))
    assert f'datetime="{local.isoformat()}"' in body
    assert f">{local:%Y-%m-%d %H:%M:%S} Asia/Shanghai<" in body


def test_a_prefixed_page_is_left_in_its_language_and_sign_up_keeps_the_way_back():
    activity = make_activity(started=False)
    body = Client().get(page_url(activity, "zh-hans")).content.decode()
    # shop.js follows the browser only from the unprefixed URL: it needs the default language.
    assert 'data-default-language="en"' in body and 'data-language="zh-hans"' in body
    assert 'id="account-signup"' in body  # activity.js adds ?next= to it, as to "Log in"
