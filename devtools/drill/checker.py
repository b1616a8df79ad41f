"""The checker: reads a drill's history and the final state (PostgreSQL, the Redis
Cluster, the result endpoint, ``manage.py reconcile --json``) and gives one verdict per
invariant. Runs in the drill's own process, with Django set up on the drill's servers."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Verdict:
    name: str
    ok: bool
    detail: str


@dataclass
class Outcome:
    drill: str
    verdicts: list[Verdict] = field(default_factory=list)
    figures: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.verdicts.append(Verdict(name, bool(ok), detail))

    def as_dict(self) -> dict:
        return {
            "drill": self.drill,
            "ok": self.ok,
            "verdicts": [v.__dict__ for v in self.verdicts],
            "figures": self.figures,
        }


def read_history(path: Path) -> tuple[list[dict], dict]:
    records, marks = [], {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if "shopper" in entry:
            records.append(entry)
        else:
            marks.update(entry)
    return records, marks


def last_answers(records: list[dict]) -> dict[int, dict]:
    """Each shopper's final answer (the last attempt)."""
    final: dict[int, dict] = {}
    for r in sorted(records, key=lambda r: (r["shopper"], r["attempt"])):
        final[r["shopper"]] = r
    return final


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def check(
    drill: str,
    activity_id: int,
    history: Path,
    reconcile_report: dict,
    results: dict[int, dict],
    *,
    start_at: float,
    explained_anomalies: set[str],
    lost_write_explained: bool,
    identity_events: list[str],
) -> Outcome:
    """``results``: the result endpoint's answer for every shopper whose 202 has no order.
    ``explained_anomalies``: the AnomalyOrder kinds the drill's fault explains;
    ``lost_write_explained``: a 202 whose reservation vanished may be explained (a failover
    to a replica that missed it) only when the identity check noticed it
    (``identity_events``: its log lines)."""
    from django.db.models import Count, Sum

    from inventory.models import SeckillStock, StockMovement
    from orders.models import AnomalyOrder, Order
    from seckill.sale.selectors import redis_remaining

    out = Outcome(drill)
    records, marks = read_history(history)
    final = last_answers(records)
    statuses = Counter(r["status"] for r in records)
    accepted = {s for s, r in final.items() if r["status"] == 202}
    accepted_any = {r["shopper"] for r in records if r["status"] == 202}
    stock = SeckillStock.objects.get(activity_id=activity_id)
    orders = Order.objects.filter(activity_id=activity_id)
    live = orders.filter(status__in=Order.LIVE_STATUSES)
    live_units = live.aggregate(u=Sum("quantity"))["u"] or 0
    remaining = redis_remaining(activity_id)

    # 1. no oversell, in the database and in Redis
    out.add(
        "no oversell",
        live_units <= stock.total and stock.available >= 0 and (remaining is None or remaining >= 0)
        and stock.available + live_units == stock.total,
        f"{live_units} units in live orders of {stock.total}; DB available {stock.available}; "
        f"Redis remaining {remaining}",
    )  # fmt: skip

    # 2. at most one live order per shopper
    doubled = live.values("user_id").annotate(n=Count("id")).filter(n__gt=1).count()
    out.add("one live order per shopper", doubled == 0, f"{doubled} shoppers with two live orders")

    # 3. every 202 ends as an order or as a readable failure
    ordered = set(orders.values_list("user_id", flat=True))
    without_order = accepted_any - ordered
    failed = {s for s in without_order if results.get(s, {}).get("code") == "failed" and results[s].get("reason")}
    lost = without_order - failed
    lost_ok = not lost or (lost_write_explained and bool(identity_events))
    detail = (
        f"{len(accepted_any)} shoppers got 202: {len(accepted_any & ordered)} ordered, "
        f"{len(failed)} failed with a reason, {len(lost)} lost"
    )
    if lost and lost_ok:
        detail += f" (explained: a failover to a replica that missed them; noticed: {identity_events[0][-160:]})"
    elif lost:
        detail += f"; lost shoppers {sorted(lost)[:10]}, results {[results.get(s) for s in sorted(lost)[:3]]}"
    out.add("every 202 ends as an order or a failure", lost_ok, detail)
    # A purchase answered outcome_unknown (its reply from Redis lost) may have gone through.
    unsure = {r["shopper"] for r in records if r["status"] == 503 and r.get("code") == "outcome_unknown"}
    no_202 = ordered - accepted_any - unsure
    out.add(
        "no order without a 202",
        not no_202,
        f"{len(no_202)} orders whose shopper never got a 202 (nor an outcome_unknown); "
        f"{len(ordered & unsure - accepted_any)} orders of outcome_unknown purchases that went through",
    )

    # 4. no unit returned twice (the ledger)
    moves = StockMovement.objects.filter(activity_id=activity_id)
    deducted = moves.filter(kind="deduct").aggregate(u=Sum("quantity"))["u"] or 0
    returned = moves.filter(kind="return").aggregate(u=Sum("quantity"))["u"] or 0
    twice = moves.filter(kind="return", order__isnull=False).values("order").annotate(n=Count("id")).filter(n__gt=1)
    out.add(
        "no unit returned twice",
        not twice.exists() and deducted - returned == live_units,
        f"ledger: {deducted} deducted, {returned} returned, {live_units} live",
    )

    # 5. the reconciliation identities
    r = reconcile_report
    out.add(
        "reconciliation identities",
        bool(r.get("identity_ok"))
        and r.get("redis_drift") == 0
        and r.get("db_drift") == 0
        and r.get("reserved_not_ordered") == 0,
        f"identity_ok {r.get('identity_ok')}, drift Redis {r.get('redis_drift')} DB {r.get('db_drift')}, "
        f"reserved-not-ordered {r.get('reserved_not_ordered')}",
    )  # fmt: skip

    # 6. nothing sold before the start: a reservation's log id is the Redis primary's clock in ms
    early = [
        r for r in records
        if r["status"] == 202 and "-" in str(r["reservation"])
        and str(r["reservation"]).split("-")[0].isdigit() and int(str(r["reservation"]).split("-")[0]) < start_at * 1000
    ]  # fmt: skip
    out.add("nothing sold before the start", not early, f"{len(early)} reservations logged before the start")

    # 7. never a 500: a dependency away is a 503 busy, a refusal its 4xx
    errors = Counter(r["status"] for r in records if r["status"] >= 500 and r["status"] != 503)
    out.add("no 5xx but 503 busy", not errors, f"{sum(errors.values())} answers {dict(errors) or ''}".strip())

    # 8. every anomaly explained by the fault
    kinds = Counter(AnomalyOrder.objects.filter(activity_id=activity_id).values_list("kind", flat=True))
    unexplained = {k: n for k, n in kinds.items() if k not in explained_anomalies}
    out.add(
        "anomalies explained by the fault",
        not unexplained,
        f"anomalies {dict(kinds) or 'none'}" + (f"; unexplained {unexplained}" if unexplained else ""),
    )

    purchases = [r for r in records if r["status"] == 202]
    latencies = [r["answered"] - r["sent"] for r in records if r["status"]]
    flood = [r for r in records if marks.get("flood_start", 0) <= r["sent"] <= marks.get("flood_end", 1e18)]
    flood_span = (marks.get("flood_end", 0) - marks.get("flood_start", 0)) or 1
    out.figures = {
        "requests": len(records),
        "answers": {str(k): v for k, v in sorted(statuses.items())},
        "codes": dict(Counter(r["code"] for r in records).most_common()),
        "accepted": len(accepted),
        "orders": orders.count(),
        "live_units": live_units,
        "purchases_202": len(purchases),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "flood_requests_per_s": round(len(flood) / flood_span, 1),
        "flood_p50_ms": round(percentile([r["answered"] - r["sent"] for r in flood if r["status"]], 50) * 1000, 1),
        "flood_p99_ms": round(percentile([r["answered"] - r["sent"] for r in flood if r["status"]], 99) * 1000, 1),
        # the purchases that reached Redis's script (the refusals mostly end in the web process)
        "p50_202_ms": round(percentile([r["answered"] - r["sent"] for r in purchases], 50) * 1000, 1),
        "p99_202_ms": round(percentile([r["answered"] - r["sent"] for r in purchases], 99) * 1000, 1),
    }
    return out


def verdict_table(outcomes: list[Outcome]) -> str:
    names = []
    for o in outcomes:
        for v in o.verdicts:
            if v.name not in names:
                names.append(v.name)
    header = "| invariant | " + " | ".join(o.drill for o in outcomes) + " |"
    lines = [header, "|---|" + "---|" * len(outcomes)]
    for name in names:
        cells = []
        for o in outcomes:
            found = next((v for v in o.verdicts if v.name == name), None)
            cells.append("—" if found is None else ("pass" if found.ok else "FAIL"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **verdict** | " + " | ".join("**pass**" if o.ok else "**FAIL**" for o in outcomes) + " |")
    return "\n".join(lines)
