"""Recording a real concurrent history of one sale over HTTP, for the linearizability check
(tests/promises/linearizability.py).

Worker threads, each with one keep-alive connection (http.client), drive some shoppers each.
A shopper behaves like the real flood: presses Buy at the start (within ``arrival_spread``
seconds), retries about every 0.2-1 s (random) when told ``sold_out`` / ``busy`` /
``rate_limited`` / ``duplicate``; a winner polls ``GET /api/activities/<id>/result`` for its
order (as it does after a 503 ``outcome_unknown``, as the shop page does: ``none`` sends it back
to buying), then cancels it after a random delay (``POST /api/orders/<order_no>/cancel``, a share
``cancel_share`` of the winners), or lets it expire and watches it (``GET
/api/orders/<order_no>/``) until it is cancelled, and buys again; a winner whose order would
outlive the recording keeps it. Everyone keeps going until the deadline.

Every request is recorded as an ``Op`` (shopper, op, send, receive, status, code) on
time.monotonic; an expiry as an ``expiry`` op whose window is [the order's pay deadline, the
first answer that showed it cancelled]. A request that got no answer is recorded with
status None and receive +inf (its outcome is unknown)."""

from __future__ import annotations

import heapq
import http.client
import json
import math
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from tests.promises.linearizability import CANCEL, EXPIRY, PURCHASE, RELEASE, Op

RESULT, ORDER = "result", "order"  # reads: recorded, no effect in the model
# The pay deadline is the server's wall clock turned into this process's monotonic clock:
# the window starts this much earlier, for the conversion's own error.
CLOCK_MARGIN = 0.05


def monotonic_of(iso: str) -> float:
    """An ISO-8601 time of the server (same host, same wall clock) on time.monotonic."""
    wall = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    return wall - (time.time() - time.monotonic())


@dataclass
class Shopper:
    user_id: int
    key: str
    state: str = "buy"  # buy | await_order | cancel | await_expiry | done
    win_send: float = 0.0
    order_no: str = ""
    deadline: float = 0.0
    known_orders: set = field(default_factory=set)
    unanswered_cancel: Op | None = None  # a cancel that got no answer: its outcome shows later
    unsure: bool = False  # awaiting the order of a purchase answered outcome_unknown


class _Connection:
    """One keep-alive connection; reopened when idle long enough for the server to close it."""

    IDLE = 2.0  # below the server's keep-alive (gunicorn.conf.py: 5 s)

    def __init__(self, base: str):
        parts = urlsplit(base)
        self.host, self.port = parts.hostname, parts.port
        self.conn: http.client.HTTPConnection | None = None
        self.used = 0.0

    def call(self, method: str, path: str, key: str, body=None) -> tuple[int | None, dict | None, float, float]:
        """(status, JSON body, send, receive); status None and receive +inf without an answer."""
        if self.conn is None or time.monotonic() - self.used > self.IDLE:
            self.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Authorization": f"Token {key}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        send = time.monotonic()
        try:
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            return None, None, send, math.inf
        receive = time.monotonic()
        self.used = receive
        if response.will_close:
            self.close()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        return response.status, payload, send, receive

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class SaleRecorder:
    def __init__(
        self,
        base: str,
        activity_id: int,
        purchase_token: str,
        shoppers: list[tuple[int, str]],
        *,
        threads: int = 30,
        seed: int = 0,
        cancel_share: float = 0.3,
        arrival_spread: float = 0.5,
        think: tuple[float, float] = (0.2, 1.0),
        poll: tuple[float, float] = (0.15, 0.4),
        cancel_after: tuple[float, float] = (0.3, 3.0),
    ):
        self.base, self.activity_id, self.purchase_token = base, activity_id, purchase_token
        self.shoppers = [Shopper(user_id, key) for user_id, key in shoppers]
        self.threads, self.seed = threads, seed
        self.cancel_share, self.arrival_spread = cancel_share, arrival_spread
        self.think, self.poll, self.cancel_after = think, poll, cancel_after
        self.ops: list[Op] = []
        self.orders: dict[str, int] = {}  # order number -> shopper, as the shoppers learnt them
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    # --- recording -----------------------------------------------------------------------

    def _record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)

    def _answer(self, s: Shopper, kind: str, answer) -> Op:
        status, body, send, receive = answer
        code = body.get("code") if isinstance(body, dict) else None
        op = Op(s.user_id, kind, send, receive, status, code)
        self._record(op)
        return op

    # --- running -------------------------------------------------------------------------

    def run(self, until: float) -> list[Op]:
        """Drive every shopper until ``until`` (time.monotonic); returns the history."""
        start = time.monotonic()
        chunks = [self.shoppers[i :: self.threads] for i in range(self.threads)]
        workers = [
            threading.Thread(target=self._guarded, args=(chunk, start, until, random.Random(self.seed * 1000 + i)))
            for i, chunk in enumerate(chunks)
            if chunk
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(until - time.monotonic() + 120)
        assert not any(w.is_alive() for w in workers), "recorder threads still running"
        if self.errors:
            raise self.errors[0]
        return sorted(self.ops, key=lambda o: o.send)

    def _guarded(self, chunk, start, until, rng) -> None:
        try:
            self._drive(chunk, start, until, rng)
        except BaseException as exc:  # reported by run()
            self.errors.append(exc)

    def _drive(self, chunk: list[Shopper], start: float, until: float, rng: random.Random) -> None:
        connection = _Connection(self.base)
        queue = [(start + rng.uniform(0, self.arrival_spread), i, s) for i, s in enumerate(chunk)]
        heapq.heapify(queue)
        try:
            while queue:
                when, i, shopper = heapq.heappop(queue)
                if when >= until:
                    continue  # this shopper is done: the recording ends before their next step
                now = time.monotonic()
                if when > now:
                    time.sleep(min(when, until) - now)  # the shopper's own think time
                    if time.monotonic() >= until:
                        continue
                later = self._step(shopper, connection, rng, until)
                if later is not None:
                    heapq.heappush(queue, (time.monotonic() + later, i, shopper))
        finally:
            connection.close()

    def _step(self, s: Shopper, connection: _Connection, rng: random.Random, until: float) -> float | None:
        """One request of this shopper; returns the delay before their next, None when done."""
        a = self.activity_id
        if s.state == "buy":
            answer = connection.call("POST", f"/api/activities/{a}/purchase", s.key, {"token": self.purchase_token})
            op = self._answer(s, PURCHASE, answer)
            if op.status == 202 or (op.status == 503 and op.code == "outcome_unknown"):
                s.state, s.win_send, s.unsure = "await_order", op.send, op.status != 202
                return rng.uniform(*self.poll)
            if op.status == 403 and op.code == "ended":
                return None
            return rng.uniform(*self.think)

        if s.state == "await_order":
            answer = connection.call("GET", f"/api/activities/{a}/result", s.key)
            op = self._answer(s, RESULT, answer)
            body = answer[1] if isinstance(answer[1], dict) else {}
            order = body.get("order") or {}
            if op.status == 200 and op.code == "none" and s.unsure:  # it did not go through
                s.state, s.unsure = "buy", False
                return rng.uniform(*self.think)
            if op.status == 200 and op.code == "failed":  # the reservation was given back
                self._record(Op(s.user_id, RELEASE, s.win_send, op.receive, note=str(body.get("reason"))))
                s.state = "buy"
                return rng.uniform(*self.think)
            if op.status != 200 or op.code != "ordered" or order.get("order_no") in s.known_orders:
                return rng.uniform(*self.poll)
            s.order_no, s.deadline = order["order_no"], monotonic_of(order["pay_deadline"])
            s.unsure = False
            s.known_orders.add(s.order_no)
            with self._lock:
                self.orders[s.order_no] = s.user_id
            if order["status"] == "cancelled":  # expired before we looked
                return self._expired(s, order, op.receive, rng)
            if rng.random() < self.cancel_share:
                s.state = "cancel"
                return rng.uniform(*self.cancel_after)
            if s.deadline < until:
                s.state = "await_expiry"
                return max(0.0, s.deadline - time.monotonic()) + rng.uniform(*self.poll)
            s.state = "done"  # keeps the order
            return None

        if s.state == "cancel":
            answer = connection.call("POST", f"/api/orders/{s.order_no}/cancel", s.key)
            status, _, send, receive = answer
            if status != 200:
                op = self._answer(s, CANCEL, answer)  # 409 (paid?) or no answer: watch the order
                s.unanswered_cancel = op if status is None else None
                s.state = "await_expiry"
                return rng.uniform(*self.poll)
            # 200 also answers a cancel of an order the deadline cancelled first: ask which.
            read = connection.call("GET", f"/api/orders/{s.order_no}/", s.key)
            self._answer(s, ORDER, read)
            reason = read[1].get("cancel_reason") if isinstance(read[1], dict) else None
            if reason == "timeout":
                self._record(Op(s.user_id, EXPIRY, s.deadline - CLOCK_MARGIN, receive, note=s.order_no))
            else:
                self._record(Op(s.user_id, CANCEL, send, receive, 200, "cancelled", note=s.order_no))
            s.state = "buy"
            return rng.uniform(*self.think)

        if s.state == "await_expiry":
            answer = connection.call("GET", f"/api/orders/{s.order_no}/", s.key)
            op = self._answer(s, ORDER, answer)
            order = answer[1] if isinstance(answer[1], dict) else {}
            if op.status == 200 and order.get("status") == "cancelled":
                return self._expired(s, order, op.receive, rng)
            if op.status == 200 and order.get("status") == "paid":
                s.state = "done"
                return None
            return rng.uniform(*self.poll)
        return None

    def _expired(self, s: Shopper, order: dict, seen: float, rng: random.Random) -> float:
        """The order is seen cancelled: by its deadline (an expiry), or by the shopper's own
        cancel whose answer was lost (that cancel took effect by now)."""
        if order.get("cancel_reason") == "timeout":
            self._record(Op(s.user_id, EXPIRY, s.deadline - CLOCK_MARGIN, seen, note=s.order_no))
        elif s.unanswered_cancel is not None:
            lost = s.unanswered_cancel
            with self._lock:
                self.ops.remove(lost)
                self.ops.append(Op(s.user_id, CANCEL, lost.send, seen, 200, "cancelled", note=f"{s.order_no}, seen"))
        else:
            raise AssertionError(f"order {s.order_no} cancelled by nobody the test knows: {order}")
        s.unanswered_cancel = None
        s.state = "buy"
        return rng.uniform(*self.think)
