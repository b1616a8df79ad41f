"""The verdict: what the rehearsal shows about the sale, from the journal (what the shoppers
were answered, with this machine's clock), each shopper's orders (the API) and the admin's
live JSON. Green only when every check holds; each red check names what broke."""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

LIVE = ("pending", "paid")
MEMORY_BOUND_S = 1.0  # an answer from a web process's memory states a fact at most 1 s old
EXPIRY_SLACK_S = 90.0  # an expired order's unit comes back between its deadline and this after


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Verdict:
    checks: list[Check]
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def green(self) -> bool:
        return all(c.ok for c in self.checks)

    def broken(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def as_dict(self) -> dict[str, Any]:
        return {
            "green": self.green,
            "checks": [c.__dict__ for c in self.checks],
            "figures": self.figures,
        }


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def purchases(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["n"] == "purchase"]


def judge(
    *,
    lines: list[dict[str, Any]],
    orders: dict[int, list[dict[str, Any]]],
    live: dict[str, Any] | None,
    sale: dict[str, Any],
    clock_offset: float,
    p99_target_ms: float,
) -> Verdict:
    """``orders``: each shopper's orders of the sale; ``live``: the admin's live JSON at the end
    (None: no admin login, the checks that need it say so); ``clock_offset``: the server's
    clock minus this machine's."""
    answers = [line for line in lines if not line["n"].startswith("note:")]
    checks = [
        units_sold_once(orders, live, sale),
        one_live_order_each(orders, per_user=int(sale.get("per_user_limit") or 1)),
        every_win_ordered(lines, orders, live),
        honest_sold_out(lines, orders, live, clock_offset),
        no_broken_answers(answers),
    ]
    figures = timings(lines, orders, sale, clock_offset)
    figures.update(capacity(answers, p99_target_ms))
    figures["slowest"] = [
        {"what": a["n"], "status": a["s"], "code": a["c"], "ms": round(a["ms"], 1), "shopper": a["u"]}
        for a in sorted(answers, key=lambda a: -a["ms"])[:10]
    ]
    figures["answers"] = len(answers)
    figures["purchase_answers"] = dict(Counter(f"{p['s']} {p['c']}".strip() for p in purchases(lines)))
    return Verdict(checks=checks, figures=figures)


def _live_units(orders: dict[int, list[dict[str, Any]]]) -> int:
    return sum(o["quantity"] for shop in orders.values() for o in shop if o["status"] in LIVE)


def units_sold_once(orders, live, sale) -> Check:
    name = "every unit sold exactly once"
    numbers = Counter(o["order_no"] for shop in orders.values() for o in shop)
    twice = [n for n, k in numbers.items() if k > 1]
    sold = _live_units(orders)
    total = int(sale["total_stock"])
    problems = []
    if twice:
        problems.append(f"{len(twice)} order numbers listed for two shoppers (e.g. {twice[0]})")
    if sold > total:
        problems.append(f"{sold} units in live orders for {total} in stock")
    if live is None:
        problems.append("the admin's live JSON could not be read (an admin login is needed)")
    else:
        admin_units = live["orders"]["paid_units"] + live["orders"]["pending_units"]
        if admin_units != sold:
            problems.append(f"the shoppers' live orders hold {sold} units, the admin counts {admin_units}")
        left, unordered = live.get("left"), live.get("reserved_not_ordered") or 0
        if left is not None and left + sold + unordered != total:
            problems.append(f"{sold} in live orders + {unordered} reserved + {left} left != {total} units")
    detail = "; ".join(problems) or f"{sold} units in live orders, each order once, the admin agrees"
    return Check(name, not problems, detail)


def one_live_order_each(orders, *, per_user: int) -> Check:
    name = "no shopper with two live orders"
    over = {u: shop for u, shop in orders.items() if sum(o["quantity"] for o in shop if o["status"] in LIVE) > per_user}
    if over:
        u = next(iter(over))
        return Check(name, False, f"{len(over)} shoppers over the limit of {per_user} (e.g. shopper {u})")
    return Check(name, True, f"every shopper holds at most {per_user} unit(s) in live orders")


def every_win_ordered(lines, orders, live) -> Check:
    name = "every 202 became an order"
    wins = Counter(p["u"] for p in purchases(lines) if p["s"] == 202)
    missing = {u: k - len(orders.get(u, [])) for u, k in wins.items() if k > len(orders.get(u, []))}
    unordered = (live or {}).get("reserved_not_ordered") or 0
    if missing:
        detail = (
            f"{sum(missing.values())} of {sum(wins.values())} 202s have no order "
            f"(e.g. shopper {next(iter(missing))}); the admin shows {unordered} reservations without an order"
            " — is a Celery worker running?"
        )
        return Check(name, False, detail)
    return Check(name, True, f"{sum(wins.values())} 202s, each with its order")


def _returns(lines, orders, clock_offset: float) -> list[float]:
    """The latest moment each returned unit may have come back (this machine's clock)."""
    back = [line["t"] + line["ms"] / 1000 for line in lines if line["n"] == "cancel" and line["s"] == 200]
    for shop in orders.values():
        for o in shop:
            if o["status"] == "cancelled" and o.get("cancel_reason") != "shopper":
                deadline = (_epoch(o.get("pay_deadline")) or 0) - clock_offset
                back.append(deadline + EXPIRY_SLACK_S)
    return sorted(back)


def honest_sold_out(lines, orders, live, clock_offset: float) -> Check:
    """Each sold_out says no unit was left at a moment of its request (or ≤ 1 s before it,
    from memory). So after it, the units sold plus those left at the end cannot exceed the
    units that came back after it."""
    name = "every sold_out came after the last unit was taken (or after a return)"
    refusals = [
        line for line in lines if line["c"] == "sold_out" and line["s"] == 410 and line["n"] in ("purchase", "ticket")
    ]
    if not refusals:
        return Check(name, True, "no sold_out answered")
    wins = sorted(p["t"] for p in purchases(lines) if p["s"] == 202)
    back = _returns(lines, orders, clock_offset)
    left_end = (live or {}).get("left") or 0
    wrong = []
    for s in refusals:
        wins_after = len(wins) - bisect.bisect_right(wins, s["t"] + s["ms"] / 1000)
        back_after = len(back) - bisect.bisect_left(back, s["t"] - MEMORY_BOUND_S)
        if left_end + wins_after > back_after:
            wrong.append((s, wins_after, back_after))
    if wrong:
        s, w, b = wrong[0]
        detail = (
            f"{len(wrong)} of {len(refusals)} sold_out answers came while units were left: e.g. shopper {s['u']}'s, "
            f"then {w} units sold and {left_end} left at the end for {b} returned"
        )
        return Check(name, False, detail)
    return Check(name, True, f"{len(refusals)} sold_out answers, none while a unit was left")


def no_broken_answers(answers) -> Check:
    name = "no answer the shop never gives"
    broken = Counter(
        f"{a['n']} {a['s'] or 'no answer'}" for a in answers if a["s"] == 0 or (a["s"] >= 500 and a["s"] != 503)
    )
    if broken:
        return Check(name, False, ", ".join(f"{k}: {v}" for k, v in broken.most_common(5)))
    return Check(name, True, "no 5xx but 503 busy, every request answered")


def timings(lines, orders, sale, clock_offset: float) -> dict[str, Any]:
    start = (_epoch(sale.get("start_at")) or 0) - clock_offset
    wins = sorted(p["t"] for p in purchases(lines) if p["s"] == 202)
    sold_outs = sorted(p["t"] + p["ms"] / 1000 for p in purchases(lines) if p["c"] == "sold_out")
    created = [(_epoch(o.get("created_at")) or 0) - clock_offset for shop in orders.values() for o in shop]
    figures: dict[str, Any] = {"wins": len(wins), "orders": len(created), "sold_out_answers": len(sold_outs)}
    if sold_outs:
        figures["sold_out_after_s"] = round(sold_outs[0] - start, 2)
        before = [w for w in wins if w <= sold_outs[0]]
        if before:
            figures["last_unit_before_sold_out_s"] = round(before[-1] - start, 2)
    if wins and created:
        figures["first_202_to_last_order_s"] = round(max(created) - wins[0], 2)
    return figures


def capacity(answers, p99_target_ms: float) -> dict[str, Any]:
    """Per second of the rehearsal: answers and their p99; the capacity seen is the highest
    rate of a second whose p99 stayed under the target."""
    by_second: dict[int, list[float]] = defaultdict(list)
    for a in answers:
        by_second[int(a["t"])].append(a["ms"])
    seconds = [(len(ms), percentile(ms, 0.99)) for ms in by_second.values()]
    under = [rate for rate, p99 in seconds if p99 <= p99_target_ms]
    return {
        "p99_target_ms": p99_target_ms,
        "capacity_rps": max(under, default=0),
        "peak_rps": max((rate for rate, _ in seconds), default=0),
        "seconds_over_target": sum(1 for _, p99 in seconds if p99 > p99_target_ms),
        "p50_ms": round(percentile([a["ms"] for a in answers], 0.5), 1),
        "p99_ms": round(percentile([a["ms"] for a in answers], 0.99), 1),
    }


def _epoch(value: Any) -> float | None:
    from rehearsal.shop import epoch

    return epoch(value)
