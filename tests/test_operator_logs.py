"""Logs an operator can read: levels that mean what they say (a restart of the stock Redis
under a live sale, beat's routine warm-ups and token cache fills are INFO), one line per
request (a 4xx is the access line alone), and the polls quiet in the access log."""

import logging
import urllib.error
import urllib.request

import pytest
from django.test import override_settings

from seckill.models import Activity
from seckill.tasks import activities_autowarm_task, reconcile_live_task
from tests.factories import make_activity
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _identity_moved(activity, **changes) -> None:
    recorded = Activity.objects.get(pk=activity.pk).redis_identity
    Activity.objects.filter(pk=activity.pk).update(redis_identity={**recorded, **changes})


def test_a_restarted_stock_redis_under_a_live_sale_is_one_info_line_and_no_warning(caplog):
    activity = make_activity(stock=5)
    # A restart keeps the data (the append-only file) and gets a new run id.
    _identity_moved(activity, servers=["0" * 40 + ":" + "1" * 40])
    with caplog.at_level(logging.INFO):
        reconcile_live_task()
    identity = [r for r in caplog.records if "redis_identity" in r.getMessage()]
    assert [r.levelname for r in identity] == ["INFO"], [(r.levelname, r.getMessage()) for r in identity]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_a_stock_redis_that_lost_writes_is_a_warning(caplog):
    activity = make_activity(stock=5)
    _identity_moved(activity, epochs=["an-older-state"])
    with caplog.at_level(logging.INFO):
        reconcile_live_task()
    identity = [r for r in caplog.records if "redis_identity" in r.getMessage()]
    assert [r.levelname for r in identity] == ["WARNING"]


@override_settings(SECKILL_TOKEN_AUTO_FILL=True)
def test_beats_routine_warm_up_and_token_fill_are_info(caplog):
    make_activity(stock=5, started=False, warm=False, start_at=_soon(), end_at=_soon(3600))
    with caplog.at_level(logging.INFO):
        activities_autowarm_task()
    routine = [r for r in caplog.records if r.getMessage().startswith(("auto warm-up", "auto token cache fill"))]
    assert routine and {r.levelname for r in routine} == {"INFO"}, [(r.levelname, r.getMessage()) for r in routine]


def _soon(seconds: int = 10):
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() + timedelta(seconds=seconds)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_4xx_is_one_line_and_a_poll_that_went_well_none(web_server, process_logs):
    activity = make_activity(stock=5)
    assert _get(f"{web_server}/no-such-page-4xx/") == 404
    assert _get(f"{web_server}/api/activities/999999/") == 404
    assert _get(f"{web_server}/api/activities/{activity.pk}/flag") == 200
    assert _get(f"{web_server}/api/activities/?after-the-polls") == 200
    log = process_logs / "gunicorn.log"
    # The last request's line: every line before it is written.
    wait_until(lambda: "after-the-polls" in log.read_text(errors="replace"), timeout=30, what="the access line")
    lines = log.read_text(errors="replace").splitlines()
    assert len([line for line in lines if "/no-such-page-4xx/" in line]) == 1, lines
    assert len([line for line in lines if "/api/activities/999999/" in line]) == 1, lines
    assert not [line for line in lines if f"/api/activities/{activity.pk}/flag" in line], lines


@pytest.mark.parametrize(
    "path, status, logged",
    [
        ("/api/activities/7/room", 200, False),
        ("/api/activities/7/flag", 200, False),
        ("/seckill/7/flag.js", 200, False),
        ("/api/activities/7/result", 200, False),
        ("/api/ping", 200, False),
        ("/api/activities/7/room", 503, True),  # a failing poll is news
        ("/api/activities/7/room/join", 200, True),
        ("/api/activities/7/purchase", 202, True),
    ],
)
def test_only_polls_that_went_well_are_quiet(path, status, logged):
    from server.request_log import QuietPollFilter

    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d', None, None)
    record.args = ("127.0.0.1:5000", "GET", path, "1.1", status)
    assert QuietPollFilter().filter(record) is logged
    assert QuietPollFilter(quiet=False).filter(record)
