"""The admin as each role sees it (superuser, merchant, reviewer): from the index, every
link on every admin page is followed (bounded: one page per kind of URL, so one change
page per model and one filter of each kind), and every action offered in a list is run
on one object (or its confirmation page opened). None may answer 403 or 500: a link or
an action shown to a role works for that role.

And the same crawl as each of two merchants, with the searches, filters, autocomplete
lists, the live view's JSON, every action and the CSV export: none shows one merchant
anything of the other's sales, and the other's URLs answer as missing ones; a superuser and
the holders of ``seckill.view_all_sales`` see both."""

import html
import re
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.utils import timezone

from core.metrics import PURCHASES
from inventory.models import SeckillStock
from orders.models import AnomalyOrder, Order, ReconciliationReport
from orders.services.addresses import order_address_attach
from orders.services.creation import orders_create_from_reservations
from orders.services.lifecycle import order_cancel, order_pay
from seckill.models import Activity, BlacklistEntry, ShopperProfile
from seckill.sale.lifecycle import activity_warmup
from seckill.sale.reconciliation import reconcile
from stock.keys import ActivityKeys
from stock.redis_client import stock_redis
from stock.reservations import reservations_pending
from stock.scripts import run_purchase

from ..factories import make_activity, make_users
from ..helpers import form_data
from ..lifecycle.helpers import buy
from ..orders.addresses import give_address
from ..paying import pay_through_provider

ADMIN = "/admin/"
MAX_PAGES = 400
# Not followed: leaving (a POST anyway) and the pages that confirm a deletion (they are
# opened, never confirmed, through the delete action).
SKIPPED = re.compile(r"^/admin/logout/|/delete/$")


# Failures that are the orders admin's (another part of issue 19), by URL: (pattern, reason).
@pytest.fixture
def shop(settings, tmp_path, django_capture_on_commit_callbacks):
    """One of everything the admin lists: sales in each state with paid, pending and
    cancelled orders, a stock check, an anomaly, a blacklist entry and a profile."""
    settings.SECKILL_PUBLISH_DIR = tmp_path / "publish"  # the publish action's files
    live = make_activity(stock=5, title="Live sale")
    make_activity(stock=3, started=False, warm=False, title="Later sale")
    users = make_users(3)
    for user in users:
        assert run_purchase(stock_redis(), ActivityKeys(live.pk), user_id=user.pk, quantity=1, limit=1).code == 1
    orders_create_from_reservations(activity_id=live.pk, entries=reservations_pending(activity_id=live.pk))
    paid, cancelled, _ = Order.objects.filter(activity=live).order_by("pk")
    order_pay(order=paid)
    with django_capture_on_commit_callbacks(execute=True):
        order_cancel(order=cancelled, reason="user")
    reconcile(activity_id=live.pk)
    AnomalyOrder.objects.create(kind=AnomalyOrder.Kind.DRIFT, activity=live, details={"redis_drift": 1})
    BlacklistEntry.objects.create(kind=BlacklistEntry.Kind.IP, value="192.0.2.0/24", reason="flood")
    ShopperProfile.objects.create(user=users[0], member_level=2)
    return live


def login(role: str) -> Client:
    User = get_user_model()
    if role == "superuser":
        user = User.objects.create_superuser("root", "root@example.com", "pw")
    else:
        user = User.objects.create_user(role, password="pw", is_staff=True)
        user.groups.add(Group.objects.get(name=f"{role}s"))
    client = Client()
    client.force_login(user)
    return client


def path_kind(path: str) -> str:
    """A path with its ids as <id>: one change page per model."""
    path = re.sub(r"/\d+/", "/<id>/", path)
    return re.sub(r"/[^/]+/(change|history|password)/$", r"/<id>/\1/", path)


class Bound:
    """Which URLs to open: each kind of path once; a query only when it brings a
    parameter not opened yet on that path (every filter, sort and date level once, not
    each of their combinations)."""

    def __init__(self):
        self.paths: set[str] = set()
        self.names: dict[str, set[str]] = {}

    def take(self, url: str) -> bool:
        parts = urlsplit(url)
        kind = path_kind(parts.path)
        names = {name for name, _ in parse_qsl(parts.query, keep_blank_values=True)} - {"_changelist_filters"}
        if kind not in self.paths:
            self.paths.add(kind)
            self.names[kind] = set(names)
            return True
        new = names - self.names[kind]
        self.names[kind] |= names
        return bool(new)


def admin_links(page: str) -> list[str]:
    links = []
    for href in re.findall(r'href="([^"#]+)"', page):
        href = html.unescape(href)
        if href.startswith("?"):
            continue  # made absolute below, by the caller
        if href.startswith(ADMIN) and not SKIPPED.search(urlsplit(href).path):
            links.append(href)
    return links


def crawl(client: Client, bodies: dict[str, str] | None = None) -> tuple[list[tuple[str, int, str]], list[str]]:
    """Every admin page reachable from the index: (url, status, found on), and the lists;
    ``bodies``, when given, receives what each URL answered (the body, or where it redirects)."""
    bound, answers, lists = Bound(), [], []
    queue = deque([(ADMIN, "start")])
    while queue and len(answers) < MAX_PAGES:
        url, found_on = queue.popleft()
        if not bound.take(url):
            continue
        response = client.get(url)
        if bodies is not None:
            bodies[url] = answer_text(response)
        status = response.status_code
        if status == 302 and "/admin/login/" in response["Location"]:
            status = 403  # sent to log in again: a link this role may not open
        answers.append((url, status, found_on))
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            continue
        page = response.content.decode()
        relative = [urlsplit(url).path + html.unescape(h) for h in re.findall(r'href="(\?[^"#]*)"', page)]
        queue.extend((link, url) for link in admin_links(page) + relative)
        if 'name="action"' in page and not urlsplit(url).query:
            lists.append(url)
    return answers, lists


def offered_actions(page: str) -> list[str]:
    select = re.search(r'<select name="action"[^>]*>(.*?)</select>', page, re.S)
    return [v for v in re.findall(r'<option value="([^"]*)"', select.group(1)) if v] if select else []


# Pages each role reaches by clicking from the index (the crawl is only as good as its reach).
SALE_PAGES = {"/admin/seckill/activity/<id>/live/", "/admin/orders/reconciliationreport/activity/<id>/"}
EXPECTED = {
    "superuser": SALE_PAGES | {"/admin/orders/anomalyorder/<id>/change/", "/admin/auth/user/<id>/change/"},
    "merchant": SALE_PAGES | {"/admin/seckill/activity/<id>/change/", "/admin/orders/order/<id>/change/"},
    "reviewer": SALE_PAGES | {"/admin/orders/anomalyorder/<id>/change/", "/admin/orders/order/"},
}


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["superuser", "merchant", "reviewer"])
def test_every_link_and_action_shown_to_a_role_works(shop, role):
    client = login(role)
    if role == "merchant":  # a merchant sees the sales they own
        Activity.objects.update(owner=get_user_model().objects.get(username="merchant"))
    answers, lists = crawl(client)
    assert len(answers) < MAX_PAGES, "the crawl did not finish within its bound"
    assert answers[0][1] == 200 and len(answers) > 5, answers

    opened = {path_kind(urlsplit(url).path) for url, status, _ in answers if status == 200}
    assert EXPECTED[role] <= opened, EXPECTED[role] - opened

    ran = []
    for changelist in lists:
        page = client.get(changelist).content.decode()
        selected = re.search(r'name="_selected_action" value="([^"]+)"', page)
        for action in offered_actions(page):
            if selected is None:
                continue
            response = client.post(changelist, {"action": action, "_selected_action": [selected.group(1)], "index": 0})
            answers.append((f"{changelist} action {action}", response.status_code, changelist))
            ran.append((changelist, action))

    bad = [(url, status, on) for url, status, on in answers if status in (403, 500) or status >= 500]
    assert not bad, bad
    if role == "reviewer":
        assert not [r for r in ran if "/seckill/activity/" in r[0]], ran  # may only look at the sales
    else:
        assert ("/admin/seckill/activity/", "duplicate") in ran, ran


def answer_text(response) -> str:
    """What an answer shows: its body (a page, JSON, a CSV export) and where it redirects."""
    body = b"" if getattr(response, "streaming", False) else response.content
    return f"{response.get('Location', '')}\n{body.decode('utf-8-sig', errors='replace')}"


# --- ownership: a merchant sees only their own sales ---------------------------------------


@dataclass
class Sale:
    """A merchant's sale as the admin could show it: ``markers`` are the strings that
    belong to this sale alone (its title, order numbers, shoppers, shipping addresses)."""

    owner: object
    activity: Activity
    orders: list[Order]
    anomaly: AnomalyOrder
    markers: list[str]


def merchant_named(name: str):
    user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="merchants"))
    return user


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def sale_made_by(merchant, word: str) -> Sale:
    """A live sale that ``merchant`` created in the admin, with a paid and a pending order
    (both with the shopper's shipping address), a stock check and an anomaly."""
    start = timezone.localtime() - timedelta(minutes=1)
    end = start + timedelta(hours=2)
    form = form_data(
        title=f"Sale {word}",
        start_at_0=start.strftime("%Y-%m-%d"),
        start_at_1=start.strftime("%H:%M:%S"),
        end_at_0=end.strftime("%Y-%m-%d"),
        end_at_1=end.strftime("%H:%M:%S"),
        safety_stock="0",
        per_user_limit="1",
        db_reserve="0",
    )
    response = logged_in(merchant).post("/admin/seckill/activity/add/", form)
    assert response.status_code == 302, response.content.decode()[:3000]
    activity = Activity.objects.get(title=f"Sale {word}")
    assert activity.owner == merchant
    activity_warmup(activity_id=activity.pk)
    shoppers = make_users(2, prefix=f"{word.lower()}-shopper")
    for i, shopper in enumerate(shoppers):
        give_address(shopper, recipient=f"{word} Recipient {i}", city=f"{word}ville", line1=f"{i} {word} Road")
    orders = buy(activity, shoppers)
    for order in orders:
        order_address_attach(order=order)
    pay_through_provider(orders[0])
    reconcile(activity_id=activity.pk)  # finds nothing: no report is stored, so one is made
    report = {"identity_ok": False, "anomalies_opened": 1, "final": False}
    ReconciliationReport.objects.create(activity=activity, identity_ok=False, anomalies_opened=1, report=report)
    anomaly = AnomalyOrder.objects.create(kind=AnomalyOrder.Kind.DRIFT, activity=activity, details={"redis_drift": 1})
    markers = [f"Sale {word}", f"{word}ville", f"{word} Road", *(o.order_no for o in orders)]
    markers += [f"{word} Recipient {i}" for i in range(2)] + [s.username for s in shoppers]
    return Sale(merchant, activity, orders, anomaly, markers)


@pytest.fixture
def two_merchants(settings, tmp_path) -> tuple[Sale, Sale]:
    settings.SECKILL_PUBLISH_DIR = tmp_path / "publish"  # the publish action's files
    alpha = sale_made_by(merchant_named("merchant-alpha"), "Alpha")
    return alpha, sale_made_by(merchant_named("merchant-bravo"), "Bravo")


# The admin pages that name one sale (or one of its rows): {activity}, {order}, {stock},
# {anomaly}, {report}, filled with another merchant's object and with a missing one.
OBJECT_URLS = [
    "/admin/seckill/activity/{activity}/change/",
    "/admin/seckill/activity/{activity}/history/",
    "/admin/seckill/activity/{activity}/delete/",
    "/admin/seckill/activity/{activity}/live/",
    "/admin/seckill/activity/{activity}/live.json",
    "/admin/orders/order/{order}/change/",
    "/admin/orders/order/{order}/history/",
    "/admin/inventory/seckillstock/{stock}/change/",
    "/admin/orders/anomalyorder/{anomaly}/change/",
    "/admin/orders/reconciliationreport/{report}/change/",
    "/admin/orders/reconciliationreport/activity/{activity}/",
]
OBJECT_POSTS = [
    "/admin/seckill/activity/{activity}/duplicate/",
    "/admin/orders/anomalyorder/{anomaly}/act/resolve/",
]
# Every foreign key of an admin model that points at a sale or an order: the autocomplete
# endpoint lists the target's rows for any of them.
AUTOCOMPLETE_SOURCES = [
    ("orders", "order", "activity"),
    ("orders", "anomalyorder", "activity"),
    ("orders", "anomalyorder", "order"),
    ("orders", "reconciliationreport", "activity"),
    ("inventory", "seckillstock", "activity"),
    ("inventory", "stockmovement", "activity"),
    ("inventory", "stockmovement", "order"),
]


def object_ids(sale: Sale | None) -> dict[str, int]:
    if sale is None:  # ids no row has
        return dict.fromkeys(["activity", "order", "stock", "anomaly", "report"], 987654321)
    return {
        "activity": sale.activity.pk,
        "order": sale.orders[0].pk,
        "stock": SeckillStock.objects.get(activity=sale.activity).pk,
        "anomaly": sale.anomaly.pk,
        "report": ReconciliationReport.objects.filter(activity=sale.activity).latest("pk").pk,
    }


def fingerprint(sale: Sale) -> dict:
    """What an action run on a sale could change."""
    fields = ["title", "status", "start_at", "end_at", "total_stock", "warmed_at"]
    return {
        "sale": Activity.objects.filter(pk=sale.activity.pk).values(*fields).get(),
        "copies": Activity.objects.filter(title__startswith=sale.activity.title).count(),
        "orders": list(Order.objects.filter(activity=sale.activity).order_by("pk").values_list("pk", "status")),
        "anomalies": list(AnomalyOrder.objects.filter(activity=sale.activity).values_list("pk", "status")),
    }


def everything_shown(client: Client, own: Sale | None, other: Sale) -> dict[str, str]:
    """What one account reaches in the admin: the crawl from the index, then the searches,
    filters, autocomplete lists, the live view's JSON, and every action offered on a list,
    run on a forged selection of ``other``'s rows and on everything the list shows (the
    CSV export included)."""
    bodies: dict[str, str] = {}
    _answers, lists = crawl(client, bodies)
    sales = [s for s in (own, other) if s is not None]
    for sale in sales:
        bodies[f"live.json {sale.activity.pk}"] = answer_text(
            client.get(f"/admin/seckill/activity/{sale.activity.pk}/live.json")
        )
    # Searches by a part of the other's strings: a page that repeats the query shows no marker.
    word = other.activity.title.split()[-1]
    for query in [f"q={word}", f"activity__id__exact={other.activity.pk}"]:
        for changelist in ["/admin/orders/order/", "/admin/orders/anomalyorder/", "/admin/inventory/seckillstock/"]:
            url = f"{changelist}?{query}"
            bodies[url] = answer_text(client.get(url))
    for url in [
        f"/admin/seckill/activity/?q={word}",
        f"/admin/orders/order/?q={other.orders[0].order_no[1:]}",
        f"/admin/orders/order/?q={other.orders[0].user.username[:-1]}",
    ]:
        bodies[url] = answer_text(client.get(url))
    for app_label, model_name, field_name in AUTOCOMPLETE_SOURCES:
        url = f"/admin/autocomplete/?app_label={app_label}&model_name={model_name}&field_name={field_name}&term="
        bodies[url] = answer_text(client.get(url))
    others_rows = {
        "/admin/seckill/activity/": [other.activity.pk],
        "/admin/orders/order/": [o.pk for o in other.orders],
        "/admin/inventory/seckillstock/": [SeckillStock.objects.get(activity=other.activity).pk],
        "/admin/orders/anomalyorder/": [other.anomaly.pk],
    }
    for changelist in lists:
        page = client.get(changelist).content.decode()
        shown = re.findall(r'name="_selected_action" value="([^"]+)"', page)
        for action in offered_actions(page):
            forged = {"action": action, "_selected_action": others_rows.get(changelist, []), "index": 0}
            bodies[f"{changelist} {action} forged"] = answer_text(client.post(changelist, forged, follow=True))
            if shown:
                every = {"action": action, "_selected_action": shown, "select_across": 1, "index": 0}
                bodies[f"{changelist} {action} all"] = answer_text(client.post(changelist, every, follow=True))
    return bodies


def leaks(bodies: dict[str, str], markers: list[str]) -> list[tuple[str, str]]:
    return [(url, marker) for url, body in bodies.items() for marker in markers if marker in body]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["alpha", "bravo"])
def test_a_merchant_sees_exports_and_reaches_only_their_own_sales(two_merchants, who):
    own, other = two_merchants if who == "alpha" else two_merchants[::-1]
    client = logged_in(own.owner)
    others_before = fingerprint(other)

    bodies = everything_shown(client, own, other)

    assert not leaks(bodies, other.markers), leaks(bodies, other.markers)
    # The crawl reached the merchant's own sale, orders and addresses (else it proves nothing).
    unseen = [m for m in own.markers if not any(m in body for body in bodies.values())]
    assert not unseen, unseen
    assert fingerprint(other) == others_before  # no action touched the other's sale

    # A URL naming the other's object answers as one naming no object at all.
    others, missing = object_ids(other), object_ids(None)
    for template in OBJECT_URLS + OBJECT_POSTS:
        method = client.post if template in OBJECT_POSTS else client.get
        theirs, nothing = method(template.format(**others)), method(template.format(**missing))
        assert (theirs.status_code, theirs.get("Location")) == (nothing.status_code, nothing.get("Location")), (
            template,
            theirs.status_code,
            nothing.status_code,
        )
        assert theirs.status_code in (302, 403, 404), (template, theirs.status_code)
    assert fingerprint(other) == others_before
    for url in ["/admin/seckill/activity/{activity}/live/", "/admin/orders/order/{order}/change/"]:
        assert client.get(url.format(**object_ids(own))).status_code == 200, url


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "reviewer", "merchant with the global permission"])
def test_superusers_and_holders_of_the_global_permission_see_every_sale(two_merchants, who):
    alpha, bravo = two_merchants
    User = get_user_model()
    if who == "superuser":
        user = User.objects.create_superuser("root", "root@example.com", "pw")
    elif who == "reviewer":
        user = User.objects.create_user("reviewer", password="pw", is_staff=True)
        user.groups.add(Group.objects.get(name="reviewers"))
    else:
        user = merchant_named("merchant-chief")
        user.user_permissions.add(Permission.objects.get(content_type__app_label="seckill", codename="view_all_sales"))
    client = logged_in(user)

    bodies = everything_shown(client, None, bravo)

    for sale in (alpha, bravo):
        expected = [sale.activity.title, *(o.order_no for o in sale.orders)]
        unseen = [m for m in expected if not any(m in body for body in bodies.values())]
        assert not unseen, unseen
        ids = object_ids(sale)
        for url in ["/admin/seckill/activity/{activity}/live/", "/admin/orders/order/{order}/change/"]:
            assert client.get(url.format(**ids)).status_code == 200, url


# Words a merchant or reviewer would need a glossary for (issue 42): none on any admin page.
JARGON = [
    "seckill stock",
    "re-warm",
    "warming",
    "warm up",
    "for the cdn",
    "stock parts",
    "admission burst",
    "room cap",
    "not_authenticated",
    "invalid_request",
    "redis drift",
    "identities hold true",
    "identities hold false",
    "units unaccounted for (redis",
]
# The stock engine's own words, as whole words in either language: the names of its parts
# and of its checks say nothing a merchant or a reviewer can act on.
ENGINE_WORDS = re.compile(
    r"\bredis\b|\bwarm|\breconcil|\bdrift|\bshards?\b|\blua\b|\btokens?\b|\bidentit(?:y|ies)\b"
    r"|预热|对账|分片|偏差|令牌"
)


# The accounts apps' entries in the index and the navigation of every page.
ACCOUNTS_APPS = re.compile(r'<div class="app-(?:auth|authtoken) module[^"]*">.*?</div>', re.S)


def visible_text(page: str) -> str:
    page = re.sub(r"<(script|style|svg)\b.*?</\1>", " ", page, flags=re.S | re.I)
    page = re.sub(r"<option\b[^>]*>", " ", page)  # the text stays, the values go
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split()).lower()


def jargon_in(text: str) -> list[str]:
    words = [word for word in JARGON if word in text]
    return words + [m.group(0) for m in ENGINE_WORDS.finditer(text)]


def in_context(text: str, word: str) -> str:
    at = text.find(word)
    return text[max(0, at - 60) : at + 60]


@pytest.mark.django_db
@pytest.mark.parametrize("language", ["en", "zh-hans"])
@pytest.mark.parametrize("role", ["superuser", "merchant", "reviewer"])
def test_no_admin_page_speaks_jargon(shop, role, language):
    client = login(role)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = language
    if role == "merchant":
        Activity.objects.update(owner=get_user_model().objects.get(username="merchant"))
    PURCHASES.labels(code="not_authenticated", activity=str(shop.pk)).inc()  # refusals the live view lists
    PURCHASES.labels(code="invalid_request", activity=str(shop.pk)).inc()
    bodies: dict[str, str] = {}
    _answers, lists = crawl(client, bodies)
    # What the actions say when they are done (their messages), on one row of each list.
    for changelist in lists:
        page = client.get(changelist).content.decode()
        selected = re.search(r'name="_selected_action" value="([^"]+)"', page)
        for action in offered_actions(page) if selected else []:
            posted = {"action": action, "_selected_action": [selected.group(1)], "index": 0}
            bodies[f"{changelist} action {action}"] = answer_text(client.post(changelist, posted, follow=True))
    # The accounts' apps (superusers only: users, groups, API tokens) keep Django's and DRF's
    # own names, and their pages list the permission names as stored.
    shown = {
        url: visible_text(ACCOUNTS_APPS.sub(" ", body))
        for url, body in bodies.items()
        if not url.startswith(("/admin/auth/", "/admin/authtoken/"))
    }
    found = sorted({(url, word, in_context(text, word)) for url, text in shown.items() for word in jargon_in(text)})
    assert not found, found
