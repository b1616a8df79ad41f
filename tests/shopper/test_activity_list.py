"""The sale lists, `/api/activities/` and `/`: upcoming and live sales first, newest first,
then the ended ones; paginated; one stock read per listed activity per page build (one
pipeline), and a page built once per cache lifetime."""

import math
import re
from collections import Counter
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone
from redis.connection import AbstractConnection

from tests.factories import make_activity

pytestmark = pytest.mark.django_db

PAGE = 20
SET_UP = {"CLIENT", "SELECT", "HELLO", "AUTH", "PING"}  # a new connection's own handshake


def many_sales(old: int, new: int):
    """``old`` ended sales started long ago, then ``new`` upcoming and live ones, the
    newest started last: their ids in the order the list must show them."""
    now = timezone.now()
    for n in range(old):
        start = now - timedelta(days=30, minutes=old - n)
        make_activity(warm=False, title=f"old {n}", start_at=start, end_at=start + timedelta(minutes=1))
    fresh = []
    for n in range(new):
        start = now + timedelta(minutes=n - new // 2)  # half live, half upcoming
        fresh.append(make_activity(warm=False, title=f"new {n}", start_at=start, end_at=now + timedelta(days=1)).pk)
    return list(reversed(fresh))


class RedisCommands:
    """Counts the Redis commands this process sends (every client: stock and cache)."""

    def __init__(self, monkeypatch):
        self.names: Counter = Counter()
        one, many = AbstractConnection.pack_command, AbstractConnection.pack_commands

        def pack_command(conn, *args):
            self.names[str(args[0]).upper()] += 1
            return one(conn, *args)

        def pack_commands(conn, commands):
            for command in commands:
                self.names[str(command[0]).upper()] += 1
            return many(conn, commands)

        monkeypatch.setattr(AbstractConnection, "pack_command", pack_command)
        monkeypatch.setattr(AbstractConnection, "pack_commands", pack_commands)

    def take(self) -> int:
        count = sum(n for name, n in self.names.items() if name not in SET_UP)
        self.names.clear()
        return count


def test_api_lists_upcoming_and_live_newest_first_in_pages_of_twenty():
    expected_first = many_sales(old=230, new=20)
    page = Client().get("/api/activities/")
    assert page.status_code == 200
    body = page.json()
    assert body["count"] == 250 and body["previous"] is None and body["next"]
    assert [a["id"] for a in body["results"]] == expected_first
    assert {a["status"] for a in body["results"]} == {"live", "upcoming"}
    assert set(body["results"][0]) >= {"id", "title", "product", "list_price", "seckill_price", "start_at", "end_at"}
    seen, pages, url = [], 0, "/api/activities/"
    while url:
        body = Client().get(url).json()
        seen += [a["id"] for a in body["results"]]
        pages, url = pages + 1, body["next"]
    assert pages == math.ceil(250 / PAGE) and len(seen) == len(set(seen)) == 250
    assert Client().get("/api/activities/?page=99").status_code == 404


def test_page_lists_upcoming_and_live_newest_first_with_pages():
    expected_first = many_sales(old=230, new=20)
    html = Client().get("/").content.decode()
    shown = [int(i) for i in re.findall(r'<li class="card" data-activity="(\d+)"', html)]
    assert shown == expected_first
    assert 'href="?page=2"' in html
    last = Client().get(f"/?page={math.ceil(250 / PAGE)}").content.decode()
    assert last.count('<li class="card"') == 250 % PAGE
    assert Client().get("/?page=99").status_code == 404


@override_settings(SECKILL_LIST_CACHE_TTL=60)
@pytest.mark.parametrize("path", ["/api/activities/", "/"])
def test_a_listed_page_costs_one_stock_read_per_activity_once_per_cache_lifetime(monkeypatch, path):
    for n in range(25):
        make_activity(title=f"warm {n}")  # warmed: each has a stock key
    client = Client()
    client.get(path)  # the session, the CSRF and the pools set up
    from core.memory import forget_all

    forget_all()
    commands = RedisCommands(monkeypatch)
    first = client.get(path)
    assert first.status_code == 200
    assert commands.take() <= PAGE + 2  # one GET per listed activity (one pipeline), not two
    for _ in range(5):
        assert client.get(path).status_code == 200
    assert commands.take() <= 5 * 2  # built once: later requests read no stock


def test_a_sold_out_sale_says_so_on_the_list_and_is_live_again_when_units_come_back(
    django_capture_on_commit_callbacks,
):
    from orders.services.lifecycle import order_cancel
    from tests.shopper.test_activity_page import sell

    activity = make_activity(stock=1, title="Last one")
    orders = sell(activity, 1)
    card = card_html(activity)
    assert 'class="badge badge-sold_out"' in card and "sold out" in card and "None left" in card
    assert "badge-live" not in card and "0 left" not in card
    with django_capture_on_commit_callbacks(execute=True):  # the units go back to Redis after the commit
        order_cancel(order=orders[0], reason="shopper")
    card = card_html(activity)
    assert "badge-live" in card and "1 left" in card and "sold out" not in card


def card_html(activity) -> str:
    body = Client().get("/").content.decode()
    return re.search(rf'<li class="card" data-activity="{activity.pk}">.*?</li>', body, re.S).group(0)
