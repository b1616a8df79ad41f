"""The anomaly page as a reviewer: the actions offered fit the anomaly's kind and each
answers (no 403 or 500), a drift is fixed by recounting the live counter (with its effect
in the history), resolving a drift still measured says so, the action box is laid out
below the evidence, and the admin header counts the open anomalies."""

import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from orders.admin import ANOMALY_ACTIONS
from orders.models import AnomalyOrder
from orders.services.anomalies import anomaly_record
from orders.services.anomaly_actions import ANOMALY_KIND_ACTIONS
from seckill.sale.reconciliation import reconcile
from seckill.sale.selectors import redis_remaining
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from tests.shopper.conftest import chromium_browser, collected_static, shop_server  # noqa: F401 - the browser's fixtures

from ..factories import UserFactory, make_activity, make_users
from ..helpers import staff_groups_create, staff_member

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def staff_groups():
    staff_groups_create()


def _page(client, anomaly) -> str:
    response = client.get(reverse("admin:orders_anomalyorder_change", args=[anomaly.pk]))
    assert response.status_code == 200
    return response.content.decode()


def _offered(page: str) -> set[str]:
    return set(re.findall(r'name="act-([a-z]+)"', page))


def _drift(activity) -> AnomalyOrder:
    """Redis stock three units too many, as reconciliation records it."""
    stock_redis().incrby(ActivityKeys(activity.pk).stock, 3)
    report = reconcile(activity_id=activity.pk)
    assert not report["identity_ok"]
    return AnomalyOrder.objects.get(activity=activity, kind=AnomalyOrder.Kind.DRIFT)


def test_each_kind_offers_exactly_its_actions_and_each_answers_a_reviewer():
    activity = make_activity(stock=20, pay_timeout=600)
    shoppers = make_users(len(AnomalyOrder.Kind))
    _, client = staff_member("reviewers")
    for kind, shopper in zip(AnomalyOrder.Kind, shoppers, strict=True):
        anomaly, _ = anomaly_record(
            kind=kind, activity_id=activity.pk, fault_key=f"test:{kind}", details={"quantity": 1}
        )
        if kind != AnomalyOrder.Kind.DRIFT:
            AnomalyOrder.objects.filter(pk=anomaly.pk).update(user=shopper)
        page = _page(client, anomaly)
        assert _offered(page) == set(ANOMALY_KIND_ACTIONS[kind]), kind
        for action, (label, _help, _done) in ANOMALY_ACTIONS.items():
            assert (f'value="{label}"' in page) == (action in ANOMALY_KIND_ACTIONS[kind]), (kind, label)
        for action in ANOMALY_KIND_ACTIONS[kind]:
            act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, action])
            response = client.post(act, {"note": f"{action} by the test"}, follow=True)
            assert response.status_code == 200, (kind, action)
            assert b"does not apply" not in response.content, (kind, action)


def test_an_action_that_does_not_fit_the_kind_is_refused_with_a_message():
    activity = make_activity(stock=5)
    anomaly = _drift(activity)
    _, client = staff_member("reviewers")
    for action in ("return", "recreate"):
        act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, action])
        response = client.post(act, {"note": "x"}, follow=True)
        assert response.status_code == 200 and "does not apply to this anomaly" in response.content.decode()
    anomaly.refresh_from_db()
    assert anomaly.history == [] and anomaly.status == AnomalyOrder.Status.OPEN


def test_a_reviewer_derives_the_stock_of_a_drift_again_and_sees_the_effect():
    activity = make_activity(stock=5)
    anomaly = _drift(activity)
    assert redis_remaining(activity.pk) == 8
    reviewer, client = staff_member("reviewers")
    assert "Recount the live counter" in _page(client, anomaly)

    act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "rederive"])
    response = client.post(act, {"note": "Redis was restored from an old backup"}, follow=True)
    assert response.status_code == 200
    assert redis_remaining(activity.pk) == 5
    anomaly.refresh_from_db()
    entry = anomaly.history[-1]
    assert entry["action"] == "rederive_stock" and entry["by"] == reviewer.username
    assert "units left 8 → 5" in entry["result"] and "every unit accounted for" in entry["result"]
    assert anomaly.status == AnomalyOrder.Status.OPEN, "staff resolve it once they have seen the result"
    page = response.content.decode()
    assert "units left 8 → 5" in page  # the message and the history
    assert reconcile(activity_id=activity.pk)["identity_ok"]

    resolve = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "resolve"])
    client.post(resolve, {"note": "fixed by deriving the stock"})
    anomaly.refresh_from_db()
    assert anomaly.status == AnomalyOrder.Status.RESOLVED and anomaly.history[-1]["result"] == "resolved"


def test_resolving_a_drift_still_measured_says_so_in_the_history():
    activity = make_activity(stock=5)
    anomaly = _drift(activity)
    _, client = staff_member("reviewers")
    resolve = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "resolve"])
    client.post(resolve, {"note": "looks fine to me"})
    anomaly.refresh_from_db()
    assert anomaly.status == AnomalyOrder.Status.RESOLVED
    assert anomaly.history[-1]["result"] == "resolved with units still not accounted for: live counter -3 unit(s)"
    assert "units still not accounted for" in _page(client, anomaly)


def test_the_action_box_is_below_the_evidence_with_its_stylesheet():
    activity = make_activity(stock=5)
    anomaly = _drift(activity)
    _, client = staff_member("reviewers")
    page = _page(client, anomaly)
    assert 'href="/static/orders/anomaly.css"' in page or "orders/anomaly.css" in page
    assert 'class="anomaly-actions"' in page and "style=" not in page.split('class="anomaly-actions"')[1]
    from django.contrib.staticfiles import finders

    css = open(finders.find("orders/anomaly.css")).read()
    assert re.search(r"\.anomaly-actions \{[^}]*clear: both", css)
    assert re.search(r"\.anomaly-actions textarea \{[^}]*width: 100%", css)


def test_the_admin_header_counts_open_anomalies_for_those_who_may_view_them():
    activity = make_activity(stock=5)
    anomaly = _drift(activity)
    _, reviewer = staff_member("reviewers")
    index = reviewer.get(reverse("admin:index")).content.decode()
    assert re.search(r'id="anomaly-count"[^>]*>1 open anomaly<', index)
    assert "Flash sale · shop admin" in index  # the branding stays
    AnomalyOrder.objects.filter(pk=anomaly.pk).update(status=AnomalyOrder.Status.RESOLVED)
    index = reviewer.get(reverse("admin:index")).content.decode()
    assert re.search(r'id="anomaly-count"[^>]*>0 open anomalies<', index)
    # A staff member without the view permission sees no count.
    plain = UserFactory(username="plain-staff", is_staff=True)
    client = Client()
    client.force_login(plain)
    assert 'id="anomaly-count"' not in client.get(reverse("admin:index")).content.decode()


def test_in_chromium_the_action_box_is_full_width_at_1280_and_1920(shop_server, chromium_browser):  # noqa: F811
    activity = make_activity(stock=5)
    anomaly = _drift(activity)
    user = UserFactory(username="reviewer-browser", is_staff=True)
    user.set_password("pw-review-1234")
    user.save()
    user.groups.add(Group.objects.get(name="reviewers"))
    for width in (1280, 1920):
        context = chromium_browser.new_context(viewport={"width": width, "height": 900}, locale="en-US")
        page = context.new_page()
        path = reverse("admin:orders_anomalyorder_change", args=[anomaly.pk])
        page.goto(f"{shop_server}/admin/login/?next={path}")
        page.fill("#id_username", "reviewer-browser")
        page.fill("#id_password", "pw-review-1234")
        page.click("input[type=submit]")
        page.wait_for_selector("form.anomaly-actions")
        main = page.locator("#content-main").bounding_box()
        box = page.locator("form.anomaly-actions").bounding_box()
        note = page.locator("#anomaly-note").bounding_box()
        assert main and box and note
        assert box["y"] >= main["y"] + main["height"] - 1, "the action box sits below the evidence"
        assert box["width"] >= min(main["width"], 900), f"the action box is squeezed at {width} px: {box}"
        assert note["x"] + note["width"] <= box["x"] + box["width"] + 1, f"the note runs off the box at {width} px"
        assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
        assert page.locator("#anomaly-count").inner_text() == "1 open anomaly"
        page.locator("input[name=act-rederive]").click()
        page.wait_for_selector(".messagelist .success")
        context.close()
        if width == 1280:
            assert reconcile(activity_id=activity.pk)["identity_ok"]
            stock_redis().incrby(ActivityKeys(activity.pk).stock, 3)  # drift again for the 1920 px round


def test_a_rederive_while_another_reconciliation_runs_says_so_and_keeps_the_warm_up():
    activity = make_activity(stock=5)
    anomaly = _drift(activity)
    _, client = staff_member("reviewers")
    lock = stock_redis().lock(f"seckill:{ActivityKeys(activity.pk).tag}:reconcile", timeout=60)
    assert lock.acquire()
    try:
        act = reverse("admin:orders_anomalyorder_act", args=[anomaly.pk, "rederive"])
        response = client.post(act, {"note": "x"}, follow=True)
    finally:
        lock.release()
    assert response.status_code == 200 and "check again later" in response.content.decode()
    assert redis_remaining(activity.pk) == 5
    anomaly.refresh_from_db()
    assert "not checked" in anomaly.history[-1]["result"]
