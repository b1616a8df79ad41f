"""A model-based test of the promise: one activity on the real PostgreSQL and Redis, and
Hypothesis choosing the steps — purchases, drains, cancels, deadlines, payments, forced
re-warms, reconciliations, Redis emptied, Redis rolled back to an earlier snapshot,
database-path purchases (one web process's breaker open while Redis serves the others)
and admin edits of the live sale.
After every step: no oversell in the database or in Redis, at most one live order per
shopper, no unit returned twice; once settled, every 202 ended as an order or as a
`failed` result with a reason (unless a fault the test injected took it), and both
identities hold.

Bounded for CI; SECKILL_MODEL_EXAMPLES=200 runs longer."""

import os
from contextlib import suppress
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Count, Sum
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from core.errors import ApiError
from inventory.models import SeckillStock, StockMovement
from orders.models import DB_PATH_PREFIX, Order, ReleasedReservation
from orders.services.lifecycle import order_cancel, order_pay, orders_expire_overdue
from seckill.models import Activity
from seckill.purchase.fallback import purchase_fallback, reserve_participants_sync
from seckill.purchase.result import purchase_result
from seckill.sale.activities import ActivityChangeRefused, activity_save
from seckill.sale.lifecycle import WarmupError, activity_identity_check, activity_warmup
from seckill.sale.reconciliation import reconcile
from seckill.sale.replay import reservations_drain, reservations_replay
from seckill.sale.snapshot import activity_snapshot
from stock.layout import StockLayout
from stock.redis_client import stock_redis
from stock.scripts import ScriptCode
from tests.factories import make_activity, make_users

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SHOPPERS = 8
EXAMPLES = int(os.environ.get("SECKILL_MODEL_EXAMPLES", "12"))


class SaleMachine(RuleBasedStateMachine):
    shards = 1
    run = 0

    @initialize(stock=st.integers(min_value=1, max_value=6), reserve=st.integers(min_value=0, max_value=3))
    def start(self, stock, reserve):
        SaleMachine.run += 1
        self.activity = make_activity(stock=stock, shards=self.shards, per_user_limit=2, db_reserve=min(reserve, stock))
        self.layout = StockLayout(self.activity.pk, self.shards)
        self.users = make_users(SHOPPERS, prefix=f"m{self.shards}-{SaleMachine.run}-")
        self.promised: dict[str, int] = {}  # reservation id -> shopper, every 202
        self.lost: set[str] = set()  # reservations a Redis fault took with it
        self.redis_faulted = False  # after a rollback or a flush Redis may count units that are gone
        self.take_snapshot()  # the backup a rollback restores: the state right after warm-up

    # --- the sale ---------------------------------------------------------------------

    @rule(shopper=st.integers(0, SHOPPERS - 1), quantity=st.integers(1, 2))
    def purchase(self, shopper, quantity):
        user = self.users[shopper]
        reply = self.layout.reserve(stock_redis(), user_id=user.pk, quantity=quantity, limit=2)
        if reply.code == ScriptCode.RESERVED:
            self.promised[reply.reservation_id] = user.pk

    @rule(shopper=st.integers(0, SHOPPERS - 1), quantity=st.integers(1, 2))
    def database_path_purchase(self, shopper, quantity):
        """A web process whose breaker is open sells from the reserve, while Redis serves
        everyone else."""
        with suppress(ApiError):  # busy (reserve used up), duplicate, sold out
            purchase_fallback(
                activity=activity_snapshot(self.activity.pk), user_id=self.users[shopper].pk, quantity=quantity
            )

    @rule()
    def breaker_closes(self):
        """A probe (or beat) writes the database-path shoppers' records into Redis."""
        reserve_participants_sync()

    @rule(
        field=st.sampled_from(
            ["start_at", "seckill_price", "total_stock", "shards", "per_user_limit", "safety_stock", "db_reserve"]
        )
    )
    def admin_edits_the_live_sale(self, field):
        """A merchant changes a field a live sale is locked on: refused, nothing changes."""
        stored = Activity.objects.get(pk=self.activity.pk)
        edited = Activity.objects.get(pk=self.activity.pk)
        changes = {
            "start_at": stored.start_at + timedelta(hours=1),
            "seckill_price": stored.seckill_price + Decimal("1.00"),
            "total_stock": stored.total_stock + 1,
            "shards": stored.shards + 1,
            "per_user_limit": stored.per_user_limit + 1,
            "safety_stock": stored.safety_stock + 1,
            "db_reserve": stored.reserve_units + 1,
        }
        setattr(edited, field, changes[field])
        with pytest.raises(ActivityChangeRefused):
            activity_save(activity=edited)
        assert Activity.objects.get(pk=self.activity.pk).__dict__[field] == stored.__dict__[field]

    @rule()
    def admin_extends_the_end(self):
        edited = Activity.objects.get(pk=self.activity.pk)
        edited.end_at += timedelta(minutes=5)
        activity_save(activity=edited)

    @rule()
    def drain(self):
        reservations_drain(activity_id=self.activity.pk)

    @rule(which=st.integers(0, SHOPPERS - 1))
    def shopper_cancels(self, which):
        order = self._live(which, Order.Status.PENDING)
        if order is not None:
            order_cancel(order=order, reason="shopper")

    @rule(which=st.integers(0, SHOPPERS - 1))
    def deadline_passes(self, which):
        order = self._live(which, Order.Status.PENDING)
        if order is not None:
            Order.objects.filter(pk=order.pk).update(pay_deadline=order.created_at)
            orders_expire_overdue(activity_id=self.activity.pk)

    @rule(which=st.integers(0, SHOPPERS - 1))
    def pay(self, which):
        order = self._live(which, Order.Status.PENDING)
        if order is not None:
            order_pay(order=order)

    @rule()
    def forced_rewarm(self):
        # A refusal (the stock kept moving) is an outcome the invariants cover too.
        with suppress(WarmupError):
            activity_warmup(activity_id=self.activity.pk, force=True)

    @rule()
    def reconcile_now(self):
        reconcile(activity_id=self.activity.pk)

    # --- faults -----------------------------------------------------------------------

    @rule()
    def take_snapshot(self):
        client = stock_redis()
        self.snapshot: dict[str, bytes] = {k: client.dump(k) for k in self._keys() if client.exists(k)}
        self.snapshot_log = set(self._log_ids())

    @rule()
    def redis_rolled_back(self):
        """Redis comes back from the last snapshot (a restore, a failover to a stale replica).
        In production that state comes with another server run (a restart's new run id, a
        promoted replica's replication id); the test's server cannot restart, so the rule
        makes the recorded server differ, which is what the check then sees."""
        self.lost |= set(self._log_ids()) - self.snapshot_log
        self.redis_faulted = True
        client = stock_redis()
        for key in self._keys():
            client.delete(key)
        for key, value in self.snapshot.items():
            client.restore(key, 0, value, replace=True)
        recorded = Activity.objects.get(pk=self.activity.pk).redis_identity
        restarted = {**recorded, "servers": [f"{s}-before-the-restart" for s in recorded.get("servers", [])]}
        Activity.objects.filter(pk=self.activity.pk).update(redis_identity=restarted)
        activity_identity_check(activity_id=self.activity.pk)

    @rule()
    def redis_emptied(self):
        """Redis restarts empty (or its keys are evicted); beat's auto warm-up re-derives."""
        self.lost |= set(self._log_ids())
        self.redis_faulted = True
        client = stock_redis()
        for key in self._keys():
            client.delete(key)
        # Refused: the stock keys stay missing (purchases answer busy) until teardown re-warms.
        with suppress(WarmupError):
            activity_warmup(activity_id=self.activity.pk, force=True)

    # --- helpers ----------------------------------------------------------------------

    def _live(self, which: int, status: str) -> Order | None:
        return Order.objects.filter(activity=self.activity, user=self.users[which], status=status).first()

    def _keys(self) -> list[str]:
        return [k for part in self.layout.stock_keys() for k in part.all()]

    def _log_ids(self) -> list[str]:
        client = stock_redis()
        ids = []
        for keys in self.layout.shard_keys:
            ids += [e.decode() if isinstance(e, bytes) else e for e, _ in client.xrange(keys.log)]
        return ids

    # --- what must always hold --------------------------------------------------------

    @invariant()
    def no_oversell(self):
        if not hasattr(self, "activity"):
            return
        live = Order.objects.filter(activity=self.activity, status__in=Order.LIVE_STATUSES)
        live_units = live.aggregate(n=Sum("quantity"))["n"] or 0
        reserve_units = live.filter(reservation_id__startswith=DB_PATH_PREFIX).aggregate(n=Sum("quantity"))["n"] or 0
        redis_units = live_units - reserve_units
        stock = SeckillStock.objects.get(activity=self.activity)
        # One owner per unit: each path sells only its own share.
        loaded = self.activity.redis_loaded_units + stock.released  # the reserve joins once Redis sold out
        assert redis_units <= loaded
        assert reserve_units <= self.activity.reserve_units
        assert stock.available >= 0 and stock.available + live_units == stock.total
        assert stock.reserve + reserve_units + stock.released == self.activity.reserve_units
        assert not live.values("user").annotate(n=Count("id")).filter(n__gt=1).exists(), "a shopper with two orders"
        remaining, _ = self.layout.totals(stock_redis())
        if remaining is not None:
            assert remaining >= 0
            assert remaining + redis_units <= loaded, "Redis counts more than exists"
        returns = StockMovement.objects.filter(activity=self.activity, kind=StockMovement.Kind.RETURN)
        assert not returns.values("order").annotate(n=Count("id")).filter(n__gt=1).exists(), "a unit returned twice"

    def teardown(self):
        if not hasattr(self, "activity"):
            return
        # Settle: whatever is still in a log becomes an order or is given up, and the stock
        # is derived again if a fault left it so.
        activity_identity_check(activity_id=self.activity.pk)
        if self.layout.totals(stock_redis())[0] is None:
            activity_warmup(activity_id=self.activity.pk, force=True)
        reservations_replay(activity_id=self.activity.pk, grace_seconds=-1)
        ordered = set(Order.objects.filter(activity=self.activity).values_list("reservation_id", flat=True))
        released = set(
            ReleasedReservation.objects.filter(activity=self.activity).values_list("reservation_id", flat=True)
        )
        for reservation, user_id in self.promised.items():
            if reservation in ordered or reservation in self.lost:
                continue
            code, reason = purchase_result(activity_id=self.activity.pk, user_id=user_id)
            assert reservation in released or (code == "failed" and reason), (reservation, code, reason)
        if not self.redis_faulted:
            # Without a Redis fault nothing may make the guard refuse a 202: no path sold
            # a unit the other had promised.
            refused = ReleasedReservation.objects.filter(activity=self.activity, reason="no_stock")
            assert not refused.exists(), list(refused.values_list("reservation_id", flat=True))
        report = reconcile(activity_id=self.activity.pk)
        assert report["identity_ok"], report
        self.no_oversell()


class ShardedSaleMachine(SaleMachine):
    shards = 4


@pytest.mark.parametrize("machine", [SaleMachine, ShardedSaleMachine], ids=["one-key", "4-shards"])
def test_every_202_is_kept(machine):
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
