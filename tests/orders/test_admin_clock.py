"""One clock in the admin: every time a merchant or reviewer reads (the orders list, the
anomaly history, the report page, its charts, a report's title) is in the shop's zone
(settings.TIME_ZONE), 24-hour and labelled with the zone."""

import base64
import re
from datetime import UTC, datetime

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from orders.models import AnomalyOrder, Order, ReconciliationReport
from seckill.models import Activity
from seckill.sale.reconciliation import reconcile
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis

from ..factories import make_activity, make_users
from ..helpers import staff_member
from ..lifecycle.helpers import buy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("staff_groups")]

# 2026-12-06 06:30:00 UTC is 14:30:00 in Shanghai: a UTC clock shows "06:30".
MOMENT = datetime(2026, 12, 6, 6, 30, 0, tzinfo=UTC)
SHOP = "14:30:00"


@pytest.fixture
def staff_groups():
    from ..helpers import staff_groups_create

    staff_groups_create()


def _svg_texts(data_uri: str) -> str:
    return base64.b64decode(data_uri.split(",", 1)[1]).decode()


@override_settings(TIME_ZONE="Asia/Shanghai")
def test_the_orders_list_shows_the_shops_time_labelled():
    activity = make_activity(stock=3)
    (order,) = buy(activity, make_users(1))
    Order.objects.filter(pk=order.pk).update(status=Order.Status.PAID, paid_at=MOMENT)
    _, client = staff_member(None)
    page = client.get("/admin/orders/order/").content.decode()
    assert "paid (asia/shanghai)" in page.lower()
    assert "2026-12-06 14:30" in page
    assert "06:30" not in page and "p.m." not in page and "a.m." not in page


@override_settings(TIME_ZONE="Asia/Shanghai")
def test_the_anomaly_history_and_evidence_are_in_the_shops_time():
    activity = make_activity(stock=5)
    stock_redis().incrby(ActivityKeys(activity.pk).stock, 3)
    reconcile(activity_id=activity.pk)
    anomaly = AnomalyOrder.objects.get(activity=activity, kind=AnomalyOrder.Kind.DRIFT)
    anomaly.history = [{"action": "resolve", "by": "rev", "at": MOMENT.isoformat(), "note": "n", "result": "ok"}]
    anomaly.save(update_fields=["history"])
    _, client = staff_member("reviewers")
    page = client.get(reverse("admin:orders_anomalyorder_change", args=[anomaly.pk])).content.decode()
    assert f"2026-12-06 {SHOP} Asia/Shanghai" in page
    assert MOMENT.isoformat() not in page  # no raw ISO


@override_settings(TIME_ZONE="Asia/Shanghai")
def test_the_report_page_its_charts_and_a_reports_title_are_in_the_shops_time():
    activity = make_activity(stock=5)
    Activity.objects.filter(pk=activity.pk).update(start_at=MOMENT, end_at=MOMENT.replace(hour=7))
    (order,) = buy(activity, make_users(1))
    Order.objects.filter(pk=order.pk).update(created_at=MOMENT)
    reconcile(activity_id=activity.pk)
    report = ReconciliationReport.objects.create(activity=activity, identity_ok=True, report={"identity_ok": True})
    ReconciliationReport.objects.filter(pk=report.pk).update(created_at=MOMENT)
    report.refresh_from_db()
    _, client = staff_member("reviewers")

    response = client.get(reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]))
    page = response.content.decode()
    assert "2026-12-06 14:30 – 2026-12-06 15:30 Asia/Shanghai" in page
    assert "True" not in page and "False" not in page  # yes / no, not Python's words
    sold = _svg_texts(response.context["charts"]["sold"])
    assert "times in Asia/Shanghai" in sold
    assert re.search(r">14:30:00<", sold), "the axis is in the shop's zone"
    assert ">06:30:00<" not in sold

    assert str(report) == f"stock check of sale {activity.pk} at 2026-12-06 {SHOP} Asia/Shanghai"
    change = client.get(reverse("admin:orders_reconciliationreport_change", args=[report.pk])).content.decode()
    assert f"2026-12-06 {SHOP}" in change and "checked (asia/shanghai)" in change.lower()
    assert timezone.get_current_timezone_name() == "Asia/Shanghai"
