"""Locust users that shop as the shop's own pages do (static/seckill/activity.js and room.js):
the same requests, in the same order, at the same pace.

Direct sale: the page and its assets, /api/me, the flag (flag.js) polled with the page's
back-off until the start, Buy a human's moment after the button turns on, the 10 s grey
button between tries, the result polled (every 0.5 s twenty times, then every 2 s), then
pay, cancel or let the order expire. Waiting room: the room page, join, the status polled at
the room's pace (1 s while the queue moves or the turn is near, x1.5 up to 10 s while nothing
changes, x2 up to 15 s on errors), join again after the draw for the place, the ticket when
let in, then buy with the sale's token and the ticket, and the same after the order."""

from __future__ import annotations

import json
import random
import re
import time
from itertools import count
from typing import Any

import gevent
from locust import HttpUser, task
from requests.adapters import HTTPAdapter

from rehearsal.journal import JOURNAL

COOLDOWN_S = 10.0  # activity.js COOLDOWN_MS: the grey button after each press
RESULT_FAST_TRIES, RESULT_FAST_S, RESULT_SLOW_S = 20, 0.5, 2.0  # waitForOrder
RESULT_GIVE_UP_S = 120.0
BUY_TRIES = 5  # presses of a shopper who keeps being told to try again (429, 503)
ASSET = re.compile(r'(?:src|href)="(/static/[^"]+\.(?:js|css))"')
CODED = {"purchase", "result", "join", "ticket", "pay", "checkout", "cancel", "me", "address"}


def flag_delay(flag: dict[str, Any], left_s: float) -> float | None:
    """activity.js pollDelay(): seconds to the next flag, None once the sale has ended."""
    if flag.get("ended"):
        return None
    if flag.get("token"):
        return 30.0
    jitter = 0.85 + random.random() * 0.3  # the page spreads the crowd's polls
    if left_s > 300:
        return 60 * jitter
    if left_s > 60:
        return 15 * jitter
    if left_s > 10:
        return 3 * jitter
    if left_s > 1.5:
        return 1.0
    return max(0.25, left_s + 0.05)


def room_delay(previous: float, *, moved: bool, near: bool, failed: bool) -> float:
    """room.js poll(): its back-off."""
    if failed:
        return min(previous * 2, 15.0)
    return 1.0 if moved or near else min(previous * 1.5, 10.0)


class Plan:
    """What every shopper of this process shares: set by the locustfile at start."""

    activity = 0
    room = False
    tokens: list[str] = []
    worker_index = 0
    workers = 1
    mix = (0.8, 0.1, 0.1)  # pay, cancel, expire
    source_addresses = False
    finished = 0
    next_index = count()


class SourceAddressAdapter(HTTPAdapter):
    """Connections from one loopback address of the shopper's own (127.0.0.0/8 is all
    loopback on Linux): per-address limits see one shopper each, as on the internet."""

    def __init__(self, address: str):
        self.address = address
        super().__init__(pool_connections=1, pool_maxsize=2)

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


def loopback_address(index: int) -> str:
    n = index + 2  # from 127.0.0.2: 127.0.0.1 stays the operator's
    return f"127.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


class Shopper(HttpUser):
    """One shopper with one API token: their whole journey once, then idle."""

    abstract = False

    def on_start(self) -> None:
        k = next(Plan.next_index)
        self.index = Plan.worker_index + k * Plan.workers
        self.key = Plan.tokens[self.index] if self.index < len(Plan.tokens) else None
        self.auth = {"Authorization": f"Token {self.key}"}
        self.clock_offset = 0.0  # the server's clock minus ours, from the flag
        self.done = False
        if Plan.source_addresses:
            adapter = SourceAddressAdapter(loopback_address(self.index))
            self.client.mount("http://", adapter)

    @task
    def shop(self) -> None:
        if self.done or self.key is None:
            gevent.sleep(3600)
            return
        try:
            self.room_journey() if Plan.room else self.direct_journey()
        finally:
            self.done = True
            Plan.finished += 1

    # --- requests -------------------------------------------------------------------------
    def call(self, method: str, path: str, name: str, **kwargs) -> tuple[int, dict[str, Any]]:
        """One request as the page sends it; (status, JSON body or {}). Only answers the shop
        never gives (5xx other than 503, no answer) count as failures in Locust's figures."""
        context: dict[str, Any] = {"shopper": self.index}
        body: dict[str, Any] = {}
        with self.client.request(method, path, name=name, catch_response=True, context=context, **kwargs) as r:
            if name in CODED or "json" in r.headers.get("Content-Type", ""):
                try:
                    parsed = r.json()
                    body = parsed if isinstance(parsed, dict) else {}
                except ValueError:
                    body = {}
            if r.status_code == 0 or (r.status_code >= 500 and r.status_code != 503):
                r.failure(f"{r.status_code} {body.get('code', '')}")
            else:
                r.success()
            return r.status_code, body

    def note(self, what: str, **data: Any) -> None:
        JOURNAL.add({"t": time.time(), "ms": 0, "n": f"note:{what}", "s": 0, "c": "", "u": self.index, **data})

    def page(self, path: str) -> None:
        """The page and the assets it names (a browser with an empty cache), then /api/me."""
        with self.client.get(path, name="page", catch_response=True, context={"shopper": self.index}) as r:
            html = r.text if r.status_code == 200 else ""
            r.success() if r.status_code < 500 else r.failure(str(r.status_code))
        for asset in sorted(set(ASSET.findall(html))):
            self.call("GET", asset, "asset")
        self.call("GET", "/api/me", "me", headers=self.auth)

    def flag(self) -> dict[str, Any] | None:
        """flag.js, as the page loads it (a fresh URL each time); the server's clock noted."""
        sent = time.time()
        path = f"/seckill/{Plan.activity}/flag.js?v={random.getrandbits(64):016x}"
        with self.client.get(path, name="flag", catch_response=True, context={"shopper": self.index}) as r:
            text = r.text if r.status_code == 200 else ""
            r.success() if r.status_code < 500 or r.status_code == 503 else r.failure(str(r.status_code))
        try:
            flag = json.loads(text[text.index("{") : text.index("};") + 1])
        except ValueError:
            return None
        server = _epoch(flag.get("server_time"))
        if server is not None:
            self.clock_offset = server - (sent + time.time()) / 2
        return flag

    # --- a direct sale ----------------------------------------------------------------------
    def direct_journey(self) -> None:
        self.page(f"/seckill/{Plan.activity}/")
        flag = self.wait_for_start()
        if flag is None or flag.get("sold_out"):
            return  # the page shows "sold out": the button never turns on
        gevent.sleep(random.uniform(0.1, 1.0))  # a human's moment after the button turns on
        for _ in range(BUY_TRIES):
            pressed = time.monotonic()
            status, body = self.call(
                "POST",
                f"/api/activities/{Plan.activity}/purchase",
                "purchase",
                json={"token": flag["token"], "quantity": 1},
                headers=self.auth,
            )
            code = body.get("code", "")
            if status == 202:
                return self.after_win()
            if code == "duplicate":
                return self.after_win()  # the page asks the result: an order may be there
            if code in ("sold_out", "ended") or status in (401, 404):
                return
            if code in ("not_started", "bad_token"):
                flag = self.flag() or flag
            # The grey button, then the shopper presses again.
            gevent.sleep(max(0.0, COOLDOWN_S - (time.monotonic() - pressed)) + random.uniform(0.1, 1.0))
            refreshed = self.flag()
            if refreshed is not None:
                if refreshed.get("sold_out") or refreshed.get("ended"):
                    return
                flag = refreshed if refreshed.get("token") else flag

    def wait_for_start(self) -> dict[str, Any] | None:
        while True:
            flag = self.flag()
            if flag is None:
                gevent.sleep(2.0)
                continue
            if flag.get("ended"):
                return None
            if flag.get("started") and flag.get("token"):
                return flag
            start = _epoch(flag.get("start_at")) or 0.0
            left = start - (time.time() + self.clock_offset)
            gevent.sleep(flag_delay(flag, left) or 2.0)

    # --- after a win: the order, then pay, cancel or let it expire --------------------------
    def after_win(self) -> None:
        order = self.wait_for_order()
        if order is None:
            return
        self.note("ordered", o=order["order_no"])
        if order.get("status") != "pending":
            return
        pay, cancel, _ = Plan.mix
        roll = random.random()
        gevent.sleep(random.uniform(1.0, 3.0))  # reading the page
        if roll < pay:
            self.pay(order["order_no"])
        elif roll < pay + cancel:
            self.call("POST", f"/api/orders/{order['order_no']}/cancel", "cancel", headers=self.auth)
        else:
            self.note("let_expire", o=order["order_no"])

    def wait_for_order(self) -> dict[str, Any] | None:
        began = time.monotonic()
        for attempt in count():
            status, body = self.call("GET", f"/api/activities/{Plan.activity}/result", "result", headers=self.auth)
            if status == 200 and body.get("code") == "ordered" and body.get("order"):
                return body["order"]
            if status == 200 and body.get("code") in ("failed", "none"):
                return None
            if time.monotonic() - began > RESULT_GIVE_UP_S:
                self.note("result_gave_up")
                return None
            gevent.sleep(RESULT_FAST_S if attempt < RESULT_FAST_TRIES else RESULT_SLOW_S)
        return None

    def pay(self, order_no: str) -> None:
        address = {
            "recipient": f"Shopper {self.index}",
            "phone": "+86 138 0000 0000",
            "country": "CN",
            "city": "Hangzhou",
            "line1": "1 Rehearsal Road",
            "postal_code": "310000",
        }
        self.call("PUT", "/api/me/address", "address", json=address, headers=self.auth)
        status, body = self.call("POST", f"/api/orders/{order_no}/pay", "pay", headers=self.auth)
        pay_url = (body.get("payment") or {}).get("pay_url")
        if status != 200 or not pay_url:
            return
        gevent.sleep(random.uniform(1.0, 3.0))  # at the provider's checkout
        self.call("POST", pay_url, "checkout", json={"outcome": "succeeded"}, headers={"Accept": "application/json"})

    # --- a waiting-room sale ------------------------------------------------------------------
    def room_journey(self) -> None:
        self.page(f"/seckill/{Plan.activity}/room/")
        place = self.join()
        delay, previous = 1.0, None
        while True:
            status, room = self.call("GET", f"/api/activities/{Plan.activity}/room", "room")
            if status != 200:
                delay = room_delay(delay, moved=False, near=False, failed=True)
                gevent.sleep(delay)
                continue
            state = room.get("state")
            if room.get("sold_out") or state in ("closed", "ended"):
                return
            if place is None and state not in ("pre_queue", "not_open"):
                place = self.join()  # the draw is made: the same call answers the place now
            serving = room.get("now_serving") or 0
            if place is not None and place <= serving and state == "open":
                outcome = self.admitted()
                if outcome != "not_admitted":
                    return
            moved = previous is None or previous.get("now_serving") != serving or previous.get("state") != state
            near = place is not None and place - serving - 1 < 50
            delay = room_delay(delay, moved=moved, near=near, failed=False)
            previous = room
            gevent.sleep(delay)

    def join(self) -> int | None:
        for _ in range(30):
            status, body = self.call("POST", f"/api/activities/{Plan.activity}/room/join", "join", headers=self.auth)
            if status == 200:
                return body.get("place")
            if status in (404, 409) or body.get("code") == "ended":
                return None
            gevent.sleep(2.0)  # not open yet, rate limited or busy: the shopper tries again
        return None

    def admitted(self) -> str:
        """The ticket, then the purchase with it: the answer's code."""
        status, body = self.call("POST", f"/api/activities/{Plan.activity}/room/ticket", "ticket", headers=self.auth)
        if status != 200:
            return body.get("code", "") or str(status)
        ticket = body["ticket"]
        gevent.sleep(random.uniform(0.2, 1.5))  # the buy button appears; the shopper presses it
        for _ in range(BUY_TRIES):
            _, flag = self.call("GET", f"/api/activities/{Plan.activity}/flag", "flag_api")
            token = flag.get("token")
            if not token:
                gevent.sleep(COOLDOWN_S)
                continue
            status, body = self.call(
                "POST",
                f"/api/activities/{Plan.activity}/purchase",
                "purchase",
                json={"token": token, "quantity": 1, "ticket": ticket},
                headers=self.auth,
            )
            if status == 202 or body.get("code") == "duplicate":
                self.after_win()
                return "bought"
            if status not in (429, 503):
                return body.get("code", "") or str(status)
            gevent.sleep(COOLDOWN_S)
        return "gave_up"


def answer_code(response) -> str:
    """The JSON answer's ``code`` ("" when there is none)."""
    try:
        body = response.json()
    except (ValueError, AttributeError):
        return ""
    return str(body.get("code", "")) if isinstance(body, dict) else ""


def _epoch(value: Any) -> float | None:
    from datetime import datetime

    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
