"""The live view in a merchant's words and the shop's clock: the latest stock check (quiet
ones too), refused purchases by reason rather than by code, times labelled with the zone."""

import pytest
from django.test import override_settings
from django.urls import reverse

from core.metrics import PURCHASES
from seckill.admin.dashboard import live_figures
from seckill.sale.reconciliation import reconcile
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity
from ..helpers import staff_member


@pytest.mark.django_db
def test_the_live_view_shows_the_latest_check_once_the_drift_is_fixed():
    activity = make_activity(stock=5)
    stock_redis().incrby(ActivityKeys(activity.pk).stock, 2)
    assert not reconcile(activity_id=activity.pk)["identity_ok"]  # stored: it found something
    assert live_figures(activity=activity)["anomalies"]["last_check"]["stock_agrees"] is False
    stock_redis().decrby(ActivityKeys(activity.pk).stock, 2)  # the reviewer fixed it
    assert reconcile(activity_id=activity.pk)["identity_ok"]  # a quiet check: no report stored
    check = live_figures(activity=activity)["anomalies"]["last_check"]
    assert check["stock_agrees"] is True and check["redis_drift"] == 0


@pytest.mark.django_db
@override_settings(TIME_ZONE="Asia/Shanghai")
def test_the_live_page_says_refusals_in_words_and_labels_its_clock():
    activity = make_activity(stock=3)
    PURCHASES.labels(code="not_authenticated", activity=str(activity.pk)).inc(3)
    PURCHASES.labels(code="invalid_request", activity=str(activity.pk)).inc(2)
    _, client = staff_member(None)
    page = client.get(reverse("admin:seckill_activity_live", args=[activity.pk])).content.decode()
    assert "not_authenticated" not in page and "invalid_request" not in page
    assert "not signed in" in page and "request not understood" in page
    assert 'data-zone="Asia/Shanghai"' in page and "Asia/Shanghai" in page
    figures = client.get(reverse("admin:seckill_activity_live_json", args=[activity.pk])).json()
    assert figures["refusals"]["by_reason"]["not signed in"] == 3


@pytest.mark.django_db
def test_the_live_page_shows_the_whole_stock_and_says_what_the_reserve_is():
    activity = make_activity(stock=50, db_reserve=1)
    _, client = staff_member(None)
    page = client.get(reverse("admin:seckill_activity_live", args=[activity.pk])).content.decode()
    assert 'data-field="left">50</span> left' in page
    assert "1 of them are kept aside so the sale goes on if the live counter stops" in page
