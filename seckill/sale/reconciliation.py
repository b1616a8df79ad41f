"""Reconciliation: the two identities of DESIGN.md, checked on a consistent snapshot,
every difference sorted into a bucket and acted on (docs/LIFECYCLE.md).

stock loaded into Redis = Redis remaining + reserved-not-ordered + pending + paid units
                          (of orders from Redis reservations)
DB total                = DB available + pending + paid units
database reserve        = reserve left + pending + paid units of database-path orders
                          + units released to Redis's share (the reserve handed over,
                          and the units of cancelled database-path orders)

Buckets and their actions:
- reserved_not_ordered (log entries without an order): those older than the replay
  grace are replayed into orders; after the attempt limit the replay returns the
  stock and opens an anomaly.
- pending_past_deadline: cancelled with reason "timeout" (stock back to both sides).
- cancelled_not_returned (cancelled orders of Redis reservations not in the Redis
  ``returned`` set, which names the cancelled orders whose units are in the stock key):
  their units are returned to Redis, once. (A database-path order's units join Redis's
  share in the cancel's own transaction, counted as released; the hand-over adds them.)
- not_deducted (live orders without a DEDUCT ledger row): deducted now when the
  database has the units in excess (the deduction never happened); a paid one, and
  one whose ledger row alone is missing, becomes an anomaly.
- unexplained_drift: whatever drift remains after the above: an anomaly, the metric
  ``seckill_reconcile_unexplained_drift_units`` and a ``seckill.reconcile.drift`` log line.

Every action is idempotent and every anomaly is opened once per fault, so a second run
right after the first changes nothing.
"""

import logging
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from core import metrics
from inventory.models import SeckillStock, StockMovement
from orders.models import DB_PATH_PREFIX, AnomalyOrder, Order, ReconciliationReport, ReconciliationSummary
from orders.services.anomalies import anomaly_record, order_deduction_repair
from orders.services.lifecycle import orders_expire_overdue, orders_units_return
from seckill.models import Activity
from seckill.sale.claims import claims_pending_settle
from seckill.sale.replay import reservations_replay
from seckill.sale.snapshot import activity_shards
from stock.handover import released_units_hand_over, reserve_hand_over
from stock.keys import ActivityKeys
from stock.layout import StockLayout
from stock.redis_client import StockRedis, stock_redis
from stock.scripts import LogEntry, RedisSnapshot

logger = logging.getLogger(__name__)

_SNAPSHOT_TRIES = 5
_MEMBER_CHUNK = 1000
_SAMPLE = 20  # ids listed per bucket in a stored report

BUCKETS = (
    "reserved_not_ordered",
    "pending_past_deadline",
    "cancelled_not_returned",
    "not_deducted",
    "paid_not_deducted",
    "unexplained_drift",
)

# The keys of a report that API.md promises to `reconcile --json` (a report has more).
REPORT_CONTRACT_KEYS = frozenset(
    {
        "activity",
        "redis_loaded",
        "redis_remaining",
        "reserved_not_ordered",
        "db_total",
        "db_available",
        "units_pending",
        "units_paid",
        "units_cancelled",
        "db_reserve",
        "db_reserve_left",
        "buckets",
        "anomalies_opened",
        "identity_ok",
    }
)


@dataclass
class Measurement:
    """One consistent look at both sides and what is in each bucket."""

    redis: RedisSnapshot
    db: dict
    consistent: bool
    unordered: list[LogEntry] = field(default_factory=list)
    not_returned: list[Order] = field(default_factory=list)

    @property
    def live_units(self) -> int:
        return self.db["units_pending"] + self.db["units_paid"]

    @property
    def redis_live_units(self) -> int:
        """Live units of orders made from Redis reservations (not from the reserve)."""
        return self.live_units - self.db["units_reserve_live"]

    @property
    def reserved_not_ordered_units(self) -> int:
        return sum(e.quantity for e in self.unordered)

    @property
    def redis_drift(self) -> int | None:
        """loaded - (remaining + reserved-not-ordered + live from Redis); None when not warmed."""
        if self.redis.stock is None or self.redis.loaded is None:  # not warmed
            return None
        return self.redis.loaded - (self.redis.stock + self.reserved_not_ordered_units + self.redis_live_units)

    @property
    def db_drift(self) -> int:
        """total - (available + live); negative = the database holds units it sold."""
        return self.db["db_total"] - self.db["db_available"] - self.live_units

    @property
    def reserve_drift(self) -> int:
        """reserve held - (reserve left + live database-path units + released to Redis)."""
        db = self.db
        return db["db_reserve"] - db["db_reserve_left"] - db["units_reserve_live"] - db["db_reserve_released"]

    @property
    def deductible(self) -> list[dict]:
        """Live orders without a deduction that the database's excess can cover.
        Pending orders first: a paid one becomes an anomaly either way, so when the
        excess cannot cover all, staff see the paid one."""
        excess, chosen = max(0, -self.db_drift), []
        for o in sorted(self.db["not_deducted"], key=lambda o: (o["status"] == Order.Status.PAID, o["id"])):
            if o["quantity"] <= excess:
                chosen.append(o)
                excess -= o["quantity"]
        return chosen

    @property
    def unexplained(self) -> dict:
        redis_part = None
        if self.redis_drift is not None:
            redis_part = self.redis_drift - sum(o.quantity for o in self.not_returned)
        db_part = self.db_drift + sum(o["quantity"] for o in self.deductible)
        return {"redis": redis_part, "db": db_part, "reserve": self.reserve_drift}

    def stale_unordered(self, grace_seconds: float) -> list[LogEntry]:
        cutoff_ms = (timezone.now().timestamp() - grace_seconds) * 1000
        return [e for e in self.unordered if e.timestamp_ms < cutoff_ms]


def _db_figures(activity_id: int, snapshot: RedisSnapshot) -> dict:
    """Every database figure from one REPEATABLE READ transaction: one moment in time."""
    log_ids = [e.reservation_id for e in snapshot.log]
    fresh = not connection.in_atomic_block
    with transaction.atomic():
        if fresh:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        activity = Activity.objects.only("pk", "status", "db_reserve").get(pk=activity_id)
        stock = SeckillStock.objects.get(activity_id=activity_id)
        orders = Order.objects.filter(activity_id=activity_id)
        from_reserve = Q(reservation_id__startswith=DB_PATH_PREFIX)
        sums = orders.aggregate(
            pending=Sum("quantity", filter=Q(status=Order.Status.PENDING), default=0),
            paid=Sum("quantity", filter=Q(status=Order.Status.PAID), default=0),
            cancelled=Sum("quantity", filter=Q(status=Order.Status.CANCELLED), default=0),
            reserve_live=Sum("quantity", filter=Q(status__in=Order.LIVE_STATUSES) & from_reserve, default=0),
            # Of Redis reservations: those whose units go back to Redis.
            cancelled_orders=Count("id", filter=Q(status=Order.Status.CANCELLED) & ~from_reserve),
            pending_overdue=Count("id", filter=Q(status=Order.Status.PENDING, pay_deadline__lte=timezone.now())),
        )
        # (shard, id): log ids are unique per shard only.
        ordered_log_ids = set(orders.filter(reservation_id__in=log_ids).values_list("shard", "reservation_id"))
        not_deducted = list(
            orders.filter(status__in=Order.LIVE_STATUSES)
            .exclude(stock_movements__kind=StockMovement.Kind.DEDUCT)
            .order_by("id")
            .values("id", "order_no", "status", "quantity")
        )
        # The ``returned`` set names exactly the cancelled orders whose units are in the
        # Redis stock (a warm-up derives the stock without the others and then returns
        # them), so the lookup is needed only when the set lacks some cancelled orders.
        maybe_missing = snapshot.returned != sums["cancelled_orders"]
        cancelled = orders.filter(status=Order.Status.CANCELLED).exclude(from_reserve)
        cancelled_maybe_not_returned = (
            list(cancelled.only("pk", "activity_id", "order_no", "user_id", "quantity", "reservation_id", "shard"))
            if maybe_missing
            else []
        )
    return {
        "activity_status": activity.status,
        "db_total": stock.total,
        "db_available": stock.available,
        "db_reserve": activity.reserve_units,
        "db_reserve_left": stock.reserve,
        "db_reserve_released": stock.released,
        "units_reserve_live": sums["reserve_live"],
        "units_pending": sums["pending"],
        "units_paid": sums["paid"],
        "units_cancelled": sums["cancelled"],
        "cancelled_orders": sums["cancelled_orders"],
        "pending_overdue": sums["pending_overdue"],
        "ordered_log_ids": ordered_log_ids,
        "not_deducted": not_deducted,
        "cancelled_maybe_not_returned": cancelled_maybe_not_returned,
    }


def _not_returned(client: StockRedis, keys: ActivityKeys, db: dict) -> list[Order]:
    """Cancelled orders whose units Redis has not taken back. The set holds only
    cancelled orders, so equal sizes mean all are in it and no lookup is needed."""
    by_shard: dict[int, list[Order]] = {}
    for order in db["cancelled_maybe_not_returned"]:
        by_shard.setdefault(order.shard, []).append(order)
    missing = []
    for shard, candidates in sorted(by_shard.items()):
        for i in range(0, len(candidates), _MEMBER_CHUNK):
            chunk = candidates[i : i + _MEMBER_CHUNK]
            flags = client.smismember(keys.shard(shard).returned, [o.order_no for o in chunk])
            missing += [o for o, present in zip(chunk, flags, strict=True) if not present]
    return missing


def reconciliation_measure(*, activity_id: int) -> Measurement:
    """Redis, then the database, then Redis again; equal Redis reads bracket a
    consistent database read (orders are committed before their log entry goes, and a
    cancel commits before its units return). Each shard's read is one step: a return
    moves its stock and its ``returned`` set together, so none falls between the two.
    Sharded stock (S > 1): the sums over the shards, each shard read atomically; the
    bracketing makes the whole consistent."""
    client, keys, layout = stock_redis(), ActivityKeys(activity_id), StockLayout.of(activity_id)
    before = layout.snapshot(client)
    consistent = False
    for _ in range(_SNAPSHOT_TRIES):
        db = _db_figures(activity_id, before)
        not_returned = _not_returned(client, keys, db)
        snapshot = layout.snapshot(client)
        if snapshot == before:
            consistent = True
            break
        before = snapshot
    else:
        logger.info("reconcile: activity %s kept moving; using the last snapshot", activity_id)
    return Measurement(
        redis=snapshot,
        db=db,
        consistent=consistent,
        unordered=[e for e in snapshot.log if (e.shard, e.reservation_id) not in db["ordered_log_ids"]],
        not_returned=not_returned,
    )


def _act(activity_id: int, m: Measurement, grace: float) -> tuple[dict, int]:
    """The actions of the buckets that can be fixed; returns (actions, anomalies opened)."""
    actions = {"orders_created": 0, "reservations_released": 0, "orders_cancelled": 0}
    actions |= {"orders_returned_to_redis": 0, "orders_deducted": 0, "pending_claims_settled": 0}
    actions["reserve_units_released"] = _reserve_release(activity_id, m)
    opened = 0
    # S > 1: claims a Redis error left pending (no stock moved; the shopper's "queued").
    actions["pending_claims_settled"] = claims_pending_settle(
        activity_id=activity_id, shards=activity_shards(activity_id)
    )
    if m.stale_unordered(grace):
        replay = reservations_replay(activity_id=activity_id, grace_seconds=grace)
        actions["orders_created"] = replay.created
        actions["reservations_released"] = replay.released
        opened += replay.released  # each release opens its anomaly (once: the entry leaves the log)
    if m.db["pending_overdue"]:
        actions["orders_cancelled"] = orders_expire_overdue(activity_id=activity_id)
    if m.not_returned and m.redis.warmed:  # without a stock key the next warm-up returns them
        actions["orders_returned_to_redis"] = orders_units_return(orders=m.not_returned)
    deductible = {o["id"] for o in m.deductible}
    for item in m.db["not_deducted"]:
        order = Order.objects.get(pk=item["id"])
        if order.status not in Order.LIVE_STATUSES:
            continue  # cancelled meanwhile
        deducted = item["id"] in deductible and order_deduction_repair(order=order)
        actions["orders_deducted"] += int(deducted)
        if deducted and order.status != Order.Status.PAID:
            continue
        kind = AnomalyOrder.Kind.PAID_NOT_DEDUCTED if order.status == Order.Status.PAID else None
        kind = kind or AnomalyOrder.Kind.ORDER_NOT_DEDUCTED
        details = {
            "order_no": order.order_no,
            "quantity": order.quantity,
            "action": "database stock deducted now" if deducted else "ledger row missing; stock left as it is",
        }
        _, created = anomaly_record(
            kind=kind, activity_id=activity_id, order=order, fault_key=f"order:{order.pk}", details=details
        )
        opened += created
    return actions, opened


def _reserve_release(activity_id: int, m: Measurement) -> int:
    """Redis's share sold out (its stock 0, on a consistent picture) while the database
    reserve still holds units: they join Redis's share (``stock.handover``). A purchase
    that finds the share short hands the reserve over itself; this is the net behind it.
    Every run also brings Redis up to what the database has released to its share (the
    units of cancelled database-path orders, a hand-over that reached only the database)
    and the reserve Redis counts down to the database's. Returns the units added to
    Redis's stock."""
    if m.redis.loaded is None:
        return 0  # not warmed: the warm-up derives the stock with whatever was released
    if m.consistent and m.redis.stock == 0 and m.db["db_reserve_left"] > 0:
        added = reserve_hand_over(activity_id=activity_id)
    else:
        added = released_units_hand_over(activity_id=activity_id)
    if added > 0:
        logger.info("activity %s: %s units the database released joined Redis's share", activity_id, added)
    return max(added, 0)


def _drift_anomalies(activity_id: int, m: Measurement) -> int:
    """An anomaly per unexplained drift, keyed by side and size: the same drift seen
    again is the same fault. Only on a consistent snapshot, never on a moving one."""
    if not m.consistent:
        return 0
    opened = 0
    for side, units in m.unexplained.items():
        if units:
            details = {
                "side": side,
                "units": units,
                "redis_loaded": m.redis.loaded,
                "redis_remaining": m.redis.stock,
                "db_total": m.db["db_total"],
                "db_available": m.db["db_available"],
                "db_reserve_left": m.db["db_reserve_left"],
                "units_live": m.live_units,
            }
            _, created = anomaly_record(
                kind=AnomalyOrder.Kind.DRIFT, activity_id=activity_id, fault_key=f"{side}:{units:+d}", details=details
            )
            opened += created
    return opened


def _buckets(m: Measurement, grace: float) -> dict[str, list]:
    return {
        # Every reservation without an order; the action waits for those in flight
        # (younger than the replay grace) to become orders the normal way.
        "reserved_not_ordered": [e.reservation_id for e in m.unordered],
        "pending_past_deadline": [None] * m.db["pending_overdue"],
        "cancelled_not_returned": [o.order_no for o in m.not_returned],
        "not_deducted": [o["order_no"] for o in m.db["not_deducted"]],
        "paid_not_deducted": [o["order_no"] for o in m.db["not_deducted"] if o["status"] == Order.Status.PAID],
        "unexplained_drift": [side for side, units in m.unexplained.items() if units],
    }


def reconcile(*, activity_id: int, dry_run: bool = False, final: bool = False) -> dict:
    """Measure, act on every bucket (unless ``dry_run``), measure again, open anomalies
    for what remains, store the report and return it (see API.md for its keys).

    ``final`` (closing the activity): every reservation counts as stale.
    """
    lock = None
    if not dry_run:
        # One run per activity at a time; the actions are idempotent anyway.
        name = f"seckill:{ActivityKeys(activity_id).tag}:reconcile"
        lock = stock_redis().lock(name, timeout=300, blocking_timeout=10)
        if not lock.acquire():
            raise RuntimeError(f"activity {activity_id}: another reconciliation is running")
    try:
        return _reconcile(activity_id, dry_run=dry_run, final=final)
    finally:
        if lock is not None:
            try:
                lock.release()
            except redis.exceptions.LockError:
                pass  # expired: the run outlived the lock's timeout


def _reconcile(activity_id: int, *, dry_run: bool, final: bool) -> dict:
    grace = -1.0 if final else float(settings.SECKILL_REPLAY_GRACE)
    found = reconciliation_measure(activity_id=activity_id)
    buckets = _buckets(found, grace)
    actions: dict = {}
    opened = 0
    end = found
    if not dry_run:
        actions, opened = _act(activity_id, found, grace)
        if any(actions.values()):
            end = reconciliation_measure(activity_id=activity_id)
        opened += _drift_anomalies(activity_id, end)
    unexplained = end.unexplained
    redis_drift = end.redis_drift
    identity_ok = end.db_drift == 0 and end.reserve_drift == 0 and (redis_drift is None or redis_drift == 0)
    report = {
        "activity": activity_id,
        "checked_at": timezone.now().isoformat(),
        "final": final,
        "dry_run": dry_run,
        "consistent": end.consistent,
        "redis_loaded": end.redis.loaded,
        "redis_remaining": end.redis.stock,
        "reserved_not_ordered": end.reserved_not_ordered_units,
        "db_total": end.db["db_total"],
        "db_available": end.db["db_available"],
        "units_pending": end.db["units_pending"],
        "units_paid": end.db["units_paid"],
        "units_cancelled": end.db["units_cancelled"],
        # The two shares (one owner per unit): what Redis was loaded with, and the
        # database reserve only the database path sells.
        "db_reserve": end.db["db_reserve"],
        "db_reserve_left": end.db["db_reserve_left"],
        "db_reserve_released": end.db["db_reserve_released"],
        "units_reserve_live": end.db["units_reserve_live"],
        "redis_drift": redis_drift,
        "db_drift": end.db_drift,
        "reserve_drift": end.reserve_drift,
        "unexplained_drift": unexplained,
        "buckets": {name: len(items) for name, items in buckets.items()},
        "found": {name: [i for i in items if i is not None][:_SAMPLE] for name, items in buckets.items() if items},
        "actions": actions,
        "anomalies_opened": opened,
        "identity_ok": identity_ok,
    }
    _observe(activity_id, report)
    if not dry_run:
        _store(activity_id, report, final=final, actions_taken=sum(actions.values()))
    return report


def _store(activity_id: int, report: dict, *, final: bool, actions_taken: int) -> None:
    """A report row only when the run found, did or opened something (or closes the
    activity); every run updates the activity's summary. Beat runs every few seconds: a
    row per quiet run would bury the ones staff must read.

    A run whose picture kept moving (a busy sale) measured nothing: what it found is not
    a finding, so it stores a row only for what it did, and the summary's verdict (what
    the live view shows) stays the last one measured."""
    measured = report["consistent"]
    notable = (
        final
        or actions_taken > 0
        or report["anomalies_opened"] > 0
        or (measured and (not report["identity_ok"] or any(report["buckets"].values())))
    )
    now = timezone.now()
    with transaction.atomic():
        stored = None
        if notable:
            stored = ReconciliationReport.objects.create(
                activity_id=activity_id,
                identity_ok=report["identity_ok"],
                final=final,
                anomalies_opened=report["anomalies_opened"],
                actions_taken=actions_taken,
                report=report,
            )
        summaries = ReconciliationSummary.objects.select_for_update()
        summary: ReconciliationSummary | None
        if measured:
            summary, _ = summaries.get_or_create(
                activity_id=activity_id,
                defaults={"last_checked_at": now, "last_identity_ok": report["identity_ok"], "latest": report},
            )
            summary.last_checked_at = now
            summary.last_identity_ok = report["identity_ok"]
            summary.latest = report
        else:
            summary = summaries.filter(activity_id=activity_id).first()
            if summary is None:  # nothing measured yet: no verdict to show
                return
        summary.runs += 1
        if stored is not None:
            summary.last_report = stored
            summary.quiet_runs_since_report = 0
        else:
            summary.quiet_runs_since_report += 1
        summary.save()


def _observe(activity_id: int, report: dict) -> None:
    """The metrics and the alert line of a run. A run whose picture kept moving (a busy
    sale) measured nothing: it counts as ``moving`` and leaves the drift gauges and the
    alert alone, or every busy sale with shards would page someone about drift it never had."""
    if not report["consistent"]:
        metrics.RECONCILE_RUNS.labels(outcome="moving").inc()
        return
    label = str(activity_id)
    for side, units in report["unexplained_drift"].items():
        metrics.RECONCILE_UNEXPLAINED_DRIFT.labels(activity=label, side=side).set(units or 0)
    for bucket, count in report["buckets"].items():
        metrics.RECONCILE_BUCKET_ITEMS.labels(activity=label, bucket=bucket).set(count)
    metrics.RECONCILE_RUNS.labels(outcome="ok" if report["identity_ok"] else "drift").inc()
    if not report["identity_ok"] or any(report["unexplained_drift"].values()):
        # A line an alert can fire on.
        logger.warning(
            "seckill.reconcile.drift activity=%s redis_drift=%s db_drift=%s reserve_drift=%s unexplained=%s "
            "anomalies_opened=%s",
            activity_id,
            report["redis_drift"],
            report["db_drift"],
            report["reserve_drift"],
            report["unexplained_drift"],
            report["anomalies_opened"],
        )
