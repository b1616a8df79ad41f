"""Orders are view-only in admin: a change form saved there would write the whole row
back and could undo a payment or a cancel made while the page was open."""

import csv
import html
import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.messages import get_messages
from django.test import Client, override_settings
from django.urls import reverse

from orders.models import AnomalyOrder, Order
from orders.services.addresses import order_address_attach
from orders.services.anomalies import anomaly_record
from orders.services.lifecycle import order_cancel
from seckill.models import Activity
from tests.shopper.conftest import chromium_browser, collected_static, shop_server  # noqa: F401 - the browser's fixtures

from ..factories import ProductFactory, make_activity, make_users
from ..helpers import staff_groups_create, staff_member
from ..lifecycle.helpers import buy
from ..paying import pay_through_provider
from .addresses import give_address

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_superuser_saving_an_order_page_cannot_undo_a_cancel():
    activity = make_activity(stock=2)
    (order,) = buy(activity, make_users(1))
    admin_user = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-for-tests")
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/orders/order/{order.pk}/change/"

    page = client.get(url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content  # view only
    order_cancel(order=order, reason="shopper")  # while the page is open
    response = client.post(url, {"status": "pending", "_save": "Save"})

    assert response.status_code == 403
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
    assert client.get("/admin/orders/order/add/").status_code == 403


# --- merchants, reviewers and superusers on the orders admin --------------------------


@pytest.fixture
def paid_orders():
    activity = make_activity(stock=5, product=ProductFactory(name="Phone X"))
    users = make_users(2)
    give_address(users[0], recipient='=HYPERLINK("http://evil")', city="上海")
    give_address(users[1], country="HK", postal_code="", city="香港", region="")
    orders = buy(activity, users)
    for order in orders:
        pay_through_provider(payment_ready(order))
    return activity, orders


def payment_ready(order: Order) -> Order:
    order_address_attach(order=order)
    return order


def _export(client, orders):
    return client.post(
        "/admin/orders/order/",
        {"action": "export_for_fulfilment", "_selected_action": [o.pk for o in orders]},
    )


@pytest.mark.django_db  # the staff groups are rows of a data migration: no flush
def test_a_merchant_sees_the_orders_with_addresses_and_exports_them(paid_orders):
    activity, orders = paid_orders
    merchant, client = staff_member("merchants")
    Activity.objects.filter(pk=activity.pk).update(owner=merchant)  # a merchant sees their own sales' orders
    listing = client.get("/admin/orders/order/")
    assert listing.status_code == 200
    body = listing.content.decode()
    assert "Phone X" in body and "香港" in body
    assert 'value="export_for_fulfilment"' in body
    page = client.get(f"/admin/orders/order/{orders[1].pk}/change/")
    assert page.status_code == 200 and "香港" in page.content.decode()

    export = _export(client, orders)
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(export.content.decode("utf-8-sig"))))
    assert rows[0][:3] == ["order_no", "status", "paid_at"]
    by_no = {row[0]: dict(zip(rows[0], row, strict=True)) for row in rows[1:]}
    assert set(by_no) == {o.order_no for o in orders}
    first = by_no[orders[0].order_no]
    assert first["product"] == "Phone X" and first["status"] == "paid" and first["postal_code"] == "200120"
    assert first["recipient"] == '\'=HYPERLINK("http://evil")'  # text, not a formula
    assert by_no[orders[1].order_no]["city"] == "香港"
    assert client.get(reverse("admin:orders_reconciliationreport_activity", args=[activity.pk])).status_code == 200


@pytest.mark.django_db  # the staff groups are rows of a data migration: no flush
def test_a_reviewer_is_not_offered_the_export_and_cannot_run_it(paid_orders):
    _activity, orders = paid_orders
    client = staff_member("reviewers")[1]
    listing = client.get("/admin/orders/order/")
    assert listing.status_code == 200
    assert b"export_for_fulfilment" not in listing.content
    export = _export(client, orders)
    assert not export.get("Content-Type", "").startswith("text/csv")


@pytest.mark.django_db  # the staff groups are rows of a data migration: no flush
@pytest.mark.parametrize("group", [None, "merchants", "reviewers"], ids=["superuser", "merchant", "reviewer"])
def test_every_link_on_the_orders_admin_pages_works_for_each_role(paid_orders, group):
    activity, orders = paid_orders
    anomaly, _ = anomaly_record(
        kind=AnomalyOrder.Kind.PAID_NOT_DEDUCTED,
        activity_id=activity.pk,
        order=orders[0],
        fault_key="test",
        details={"quantity": 1},
    )
    user, client = staff_member(group)
    if group == "merchants":
        Activity.objects.filter(pk=activity.pk).update(owner=user)  # a merchant sees their own sales' orders
    pages = [
        "/admin/orders/order/",
        f"/admin/orders/order/{orders[0].pk}/change/",
        "/admin/orders/anomalyorder/",
        f"/admin/orders/anomalyorder/{anomaly.pk}/change/",
        "/admin/orders/reconciliationreport/",
        reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]),
    ]
    seen = 0
    for url in pages:
        page = client.get(url)
        if page.status_code == 403:
            continue  # not this role's page: the admin does not link it either (checked below)
        assert page.status_code == 200, url
        seen += 1
        for link in set(re.findall(r'href="(/admin/[^"#]*)"', page.content.decode())):
            link = html.unescape(link)
            if link.endswith("/logout/") or "/password_change/" in link:
                continue
            answer = client.get(link)
            assert answer.status_code in (200, 302), f"{link} on {url}: {answer.status_code}"
    index = client.get("/admin/").content.decode()
    for url in pages[:5:2]:
        shown = f'href="{url}"' in index
        assert shown == (client.get(url).status_code == 200), url
    assert seen >= 2


@pytest.mark.django_db
def test_merchants_may_view_and_export_orders_and_reviewers_only_view():
    def codenames(group):
        return set(Group.objects.get(name=group).permissions.values_list("codename", flat=True))

    assert {"view_order", "export_order"} <= codenames("merchants")
    assert "view_order" in codenames("reviewers") and "export_order" not in codenames("reviewers")
    assert not {"change_order", "delete_order", "add_order"} & (codenames("merchants") | codenames("reviewers"))


# --- the fulfilment export: paid orders with an address, times in the shop's zone ---------


@pytest.mark.django_db  # the staff groups are rows of a data migration: no flush
@override_settings(TIME_ZONE="Asia/Shanghai")
def test_the_fulfilment_export_is_the_paid_orders_with_addresses_in_the_shops_zone(paid_orders):
    activity, paid = paid_orders
    unpaid_users = make_users(2, prefix="unpaid")
    pending, cancelled = buy(activity, unpaid_users)
    order_cancel(order=cancelled, reason="shopper")
    merchant, client = staff_member("merchants")
    Activity.objects.filter(pk=activity.pk).update(owner=merchant)

    export = _export(client, [*paid, pending, cancelled])
    assert export["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(export.content.decode("utf-8-sig"))))
    assert sorted(row[0] for row in rows[1:]) == sorted(o.order_no for o in paid)
    for row in rows[1:]:
        paid_at = dict(zip(rows[0], row, strict=True))["paid_at"]
        assert paid_at.endswith("+08:00"), paid_at  # ISO 8601 with the shop's offset
    told = [str(m) for m in get_messages(export.wsgi_request)]
    assert told == ["2 orders exported; 2 skipped: not paid yet, or no shipping address."], told

    nothing = _export(client, [pending, cancelled])
    assert nothing.status_code == 302  # back to the list, no empty file
    told = [str(m) for m in get_messages(nothing.wsgi_request)]
    assert told[-1:] == ["Nothing exported: the 2 selected orders are not paid yet, or have no shipping address."]


@pytest.mark.django_db  # the staff groups are rows of a data migration: no flush
def test_in_chromium_the_orders_list_fits_1280_px(paid_orders, shop_server, chromium_browser):  # noqa: F811
    activity, _orders = paid_orders
    staff_groups_create()  # a browser test's database is flushed: the groups again
    merchant, _client = staff_member("merchants")
    merchant.set_password("pw-merchant-1234")
    merchant.save()
    Activity.objects.filter(pk=activity.pk).update(owner=merchant, title="A sale with a rather long title for its list")
    context = chromium_browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    page = context.new_page()
    page.goto(f"{shop_server}/admin/login/?next=/admin/orders/order/")
    page.fill("#id_username", merchant.username)
    page.fill("#id_password", "pw-merchant-1234")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    headers = page.locator("#result_list thead th").all_inner_texts()
    assert any("STATUS" in h.upper() for h in headers) and any("PAID" in h.upper() for h in headers), headers
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    # The admin scrolls a wide table inside its own box: columns cut off there are off screen too.
    hidden = page.evaluate("(el => el.scrollWidth - el.clientWidth)(document.querySelector('#changelist .results'))")
    last = page.locator("#result_list thead th").last.bounding_box()
    context.close()
    assert overflow <= 0, f"the orders list is {overflow} px wider than a 1280 px window"
    assert hidden <= 0 and last and last["x"] + last["width"] <= 1280, f"{hidden} px of columns scrolled away: {last}"
