"""The reconciliation reports as a reviewer reads them: problems first, the run in words,
a report's detail in tables (no raw JSON), and the per-sale summary on the report page."""

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from orders.models import ReconciliationReport
from seckill.sale.reconciliation import reconcile
from tests.shopper.conftest import chromium_browser, collected_static, shop_server  # noqa: F401 - the browser's fixtures

from ..factories import UserFactory, make_activity, make_users
from ..helpers import staff_groups_create
from ..lifecycle.helpers import reserve

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def reviewer():
    staff_groups_create()  # with the reviewers' permission to see every sale
    user = UserFactory(username="reviewer", is_staff=True)
    user.groups.add(Group.objects.get(name="reviewers"))
    client = Client()
    client.force_login(user)
    return client


def _report(activity, *, identity_ok=True, opened=0, final=False, **extra) -> ReconciliationReport:
    report = {"identity_ok": identity_ok, "anomalies_opened": opened, "final": final, **extra}
    return ReconciliationReport.objects.create(
        activity=activity, identity_ok=identity_ok, final=final, anomalies_opened=opened, report=report
    )


def test_the_list_shows_problems_first_and_the_run_in_words(reviewer):
    activity = make_activity(stock=5)
    healthy = _report(activity)
    opened = _report(activity, opened=1)
    drift = _report(activity, identity_ok=False)
    final = _report(activity, final=True)
    response = reviewer.get(reverse("admin:orders_reconciliationreport_changelist"))
    assert response.status_code == 200
    listed = [r.pk for r in response.context["cl"].result_list]
    assert listed == [drift.pk, opened.pk, final.pk, healthy.pk]
    page = response.content.decode()
    assert "during the sale" in page and "final check" in page and 'errornote-inline">no<' in page
    assert "icon-no.svg" not in page, "no red cross for a run made during the sale"


def test_a_report_detail_reads_in_words_and_tables(reviewer, settings):
    settings.SECKILL_REPLAY_GRACE = 0
    activity = make_activity(stock=5)
    (user,) = make_users(1)
    reserve(activity, user)
    reconcile(activity_id=activity.pk)  # creates the order: a stored report
    stored = ReconciliationReport.objects.get(activity=activity)
    response = reviewer.get(reverse("admin:orders_reconciliationreport_change", args=[stored.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Every unit is accounted for." in page and "1 item(s) found, 1 repaired" in page
    assert "reservations without an order" in page and "orders created from reservations" in page
    assert "Outage reserve: reserve = left + sold from it + handed over" in page
    assert "handed to the live counter" in page and "in open orders sold from the reserve" in page
    assert "<pre>" not in page and '"identity_ok"' not in page, "no raw JSON"


def test_the_report_page_shows_the_summary_of_quiet_checks(reviewer):
    activity = make_activity(stock=5)
    reconcile(activity_id=activity.pk)
    reconcile(activity_id=activity.pk)
    response = reviewer.get(reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "quiet checks since the last report" in page and "none: every check was quiet" in page
    assert response.context["summary"].runs == 2
    assert response.context["figures"]["units left, as the live counter counts them (last check)"] == 5


def _overlap(a: dict, b: dict) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"] + 1
        or b["x"] + b["width"] <= a["x"] + 1
        or a["y"] + a["height"] <= b["y"] + 1
        or b["y"] + b["height"] <= a["y"] + 1
    )


def test_in_chromium_at_1280_the_report_page_and_a_report_do_not_overlap(
    shop_server,  # noqa: F811
    chromium_browser,  # noqa: F811
    settings,
    tmp_path,
):
    staff_groups_create()
    settings.SECKILL_REPLAY_GRACE = 0
    activity = make_activity(stock=5)
    (shopper,) = make_users(1)
    reserve(activity, shopper)
    reconcile(activity_id=activity.pk)
    reconcile(activity_id=activity.pk)
    stored = ReconciliationReport.objects.get(activity=activity)
    user = UserFactory(username="reviewer-charts", is_staff=True)
    user.set_password("pw-review-1234")
    user.save()
    user.groups.add(Group.objects.get(name="reviewers"))
    context = chromium_browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    path = reverse("admin:orders_reconciliationreport_activity", args=[activity.pk])
    page.goto(f"{shop_server}/admin/login/?next={path}")
    page.fill("#id_username", "reviewer-charts")
    page.fill("#id_password", "pw-review-1234")
    page.click("input[type=submit]")
    page.wait_for_selector(".report .charts img")
    boxes = [page.locator(s).bounding_box() for s in (".report-figures", ".report-summary")]
    boxes += [img.bounding_box() for img in page.locator(".report .chart img").all()]
    assert len(boxes) == 5 and all(boxes)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not _overlap(a, b), f"{a} overlaps {b}"
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
    page.screenshot(path=tmp_path / "report-page.png", full_page=True)
    page.goto(f"{shop_server}{reverse('admin:orders_reconciliationreport_change', args=[stored.pk])}")
    page.wait_for_selector("table.report-table")
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
    page.screenshot(path=tmp_path / "report-detail.png", full_page=True)
    context.close()
