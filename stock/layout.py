"""Where an activity's stock and shoppers live in Redis: the one place that knows the two
layouts.

* **One key** (S = 1): the stock, the shoppers' records (``users``: shopper → reservation
  id) and the reservation log share one hash tag, so one script checks, deducts and records
  in one atomic step.
* **S shards**: the stock is split over S hash tags (each with its own log), so a Redis
  Cluster spreads one hot sale over several nodes; a shopper's record is a claim
  ("<shard>:<reservation id>") in one of ``USER_PARTITIONS`` user partitions,
  settled around the shard's script (a claim first, then the shard).

The two need different scripts (a claim and a shard live in different slots, so no one
script can hold both); everything above the engine asks a ``StockLayout`` and never
compares S with 1 itself.

How many shards an activity has is the sale's knowledge (its activity cache): the sale
registers the lookup at start-up (SeckillConfig.ready), so the engine below it needs no
import of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .keys import USER_PARTITIONS, ActivityKeys, claim_value
from .redis_client import StockRedis
from .scripts import (
    LogEntry,
    PurchaseReply,
    RedisSnapshot,
    UnitsBack,
    run_claim_settle,
    run_claim_settles,
    run_freeze,
    run_handover,
    run_purchase,
    run_purchase_sharded,
    run_release,
    run_returns,
    run_shard_release,
    run_shard_returns,
    run_snapshot,
    run_warmup,
    shard_figures,
    shard_restocks,
    warmup_shares,
)

_lookup: Callable[[int], int] | None = None


def shards_lookup_register(lookup: Callable[[int], int]) -> None:
    global _lookup
    _lookup = lookup


def activity_shards(activity_id: int) -> int:
    if _lookup is None:  # a process that never loaded the apps: guessing S would misplace stock
        raise RuntimeError("stock.layout: no shard lookup registered (is the seckill app installed?)")
    return _lookup(activity_id)


@dataclass(frozen=True)
class StockLayout:
    activity_id: int
    shards: int = 1

    @classmethod
    def of(cls, activity_id: int) -> StockLayout:
        return cls(activity_id, activity_shards(activity_id))

    @property
    def keys(self) -> ActivityKeys:
        return ActivityKeys(self.activity_id)

    @property
    def sharded(self) -> bool:
        """Claims in user partitions, a display total, shard figures that are not the activity's."""
        return self.shards > 1

    @property
    def shard_keys(self) -> list[ActivityKeys]:
        return self.keys.shards(self.shards)

    @property
    def partitions(self) -> list[ActivityKeys]:
        """The user partitions that hold the claims (none with one key)."""
        return [self.keys.partition(p) for p in range(USER_PARTITIONS)] if self.sharded else []

    def users_of(self, user_id: int) -> ActivityKeys:
        """The keys whose ``users`` hash holds this shopper's record."""
        return self.keys.user_partition(user_id, USER_PARTITIONS) if self.sharded else self.keys

    def record(self, shard: int, reservation_id: str) -> str:
        """What a shopper's record says for a reservation: its id, or (S > 1) the claim."""
        return claim_value(shard, reservation_id) if self.sharded else reservation_id

    def stock_keys(self) -> list[ActivityKeys]:
        """Every hash tag the stock lives under: each shard's, and each user partition's."""
        return self.shard_keys + self.partitions

    # --- the scripts ------------------------------------------------------------------

    def reserve(self, client: StockRedis, *, user_id: int, quantity: int, limit: int) -> PurchaseReply:
        if not self.sharded:
            return run_purchase(client, self.keys, user_id=user_id, quantity=quantity, limit=limit)
        return run_purchase_sharded(
            client,
            self.keys,
            user_id=user_id,
            quantity=quantity,
            limit=limit,
            shards=self.shards,
            partitions=USER_PARTITIONS,
        )

    def release(
        self,
        client: StockRedis,
        entry: LogEntry,
        *,
        free_participant: bool,
        reason: str,
        live_reservation_id: str = "",
        live_shard: int = 0,
        units_back: bool = True,
    ) -> bool:
        """A reservation leaves the log, once (idempotent by the log entry), and its units
        go back on sale in its shard — or, with ``units_back`` false (the database has no
        such units), out of the shard's ``loaded``, never to be sold again.

        ``free_participant``: the shopper may buy again (``reason`` is what their result
        says); otherwise, with ``live_reservation_id`` (of ``live_shard``), their record
        names their live order's reservation again."""
        if not self.sharded:
            released = run_release(
                client,
                self.keys,
                reservation_id=entry.reservation_id,
                user_id=entry.user_id,
                quantity=entry.quantity,
                free_participant=free_participant,
                reason=reason,
                live_reservation_id=live_reservation_id,
                units_back=units_back,
            )
        else:
            # Two slots, two steps: the shard first (idempotent by the log entry), then the claim.
            released = run_shard_release(
                client,
                self.keys.shard(entry.shard),
                reservation_id=entry.reservation_id,
                quantity=entry.quantity,
                units_back=units_back,
            )
            if released:
                if free_participant:
                    new, why = "", reason
                else:
                    new, why = (claim_value(live_shard, live_reservation_id) if live_reservation_id else ""), ""
                if free_participant or new:
                    run_claim_settle(
                        client,
                        self.users_of(entry.user_id),
                        user_id=entry.user_id,
                        expected=claim_value(entry.shard, entry.reservation_id),
                        new=new,
                        reason=why,
                    )
        if released:
            client.hdel(self.keys.shard(entry.shard).attempts, entry.reservation_id)
        return released

    def units_return(self, client: StockRedis, returns: Sequence[UnitsBack]) -> list[bool]:
        """Cancelled orders' units back into the shards they came from, and their shoppers
        freed; once per order (the ``returned`` sets). True for each returned now. One
        round trip with one key, two with shards (their claims live in other slots),
        whatever the number of orders.

        With shards the claims go first: Redis lost between the two steps then leaves
        orders whose units are not back, which reconciliation finds and returns. The other
        way round it left shoppers whose claim named a cancelled order, told ``duplicate``
        for the rest of the sale. A shopper freed a moment before their units return may
        buy again at once: a unit owed to the sale for a moment, never one sold twice."""
        if not self.sharded:
            return run_returns(client, self.keys, returns)
        run_claim_settles(
            client, [(self.users_of(r.user_id), r.user_id, claim_value(r.shard, r.reservation_id)) for r in returns]
        )
        return run_shard_returns(client, self.keys, returns)

    def snapshot(self, client: StockRedis) -> RedisSnapshot:
        """Each shard read atomically; with S > 1 their sum (stock and loaded: None if any
        shard lacks it), logs ordered by (shard, id), and each shard's stock."""
        if not self.sharded:
            return run_snapshot(client, self.keys)
        parts = [run_snapshot(client, shard_keys) for shard_keys in self.shard_keys]
        stocks, loads = [p.stock for p in parts], [p.loaded for p in parts]
        return RedisSnapshot(
            stock=_sum_or_none(stocks),
            loaded=_sum_or_none(loads),
            log=tuple(e for p in parts for e in p.log),
            shard_stocks=tuple(stocks),
            returned=sum(p.returned for p in parts),
        )

    def totals(self, client: StockRedis) -> tuple[int | None, int | None]:
        """(stock, loaded) summed over the shards; each None when any shard lacks it."""
        if not self.sharded:
            values = client.mget([self.keys.stock, self.keys.loaded])
        else:
            # A pipeline, not MGET: the shards live in different Redis Cluster slots.
            pipe = client.pipeline(transaction=False)
            for shard in self.shard_keys:
                pipe.get(shard.stock)
                pipe.get(shard.loaded)
            values = pipe.execute()
        counts = [None if v is None else int(v) for v in values]
        return _sum_or_none(counts[::2]), _sum_or_none(counts[1::2])

    def warm(
        self,
        client: StockRedis,
        *,
        picture: RedisSnapshot,
        remaining: int,
        loaded: int,
        reserve: int,
        handed: int,
        epoch: str = "",
    ) -> bool:
        """Write ``remaining`` and ``loaded`` if the stock is still what ``picture`` saw
        (a compare-and-set); True if written. With them, on the activity's own tag: the
        database ``reserve`` not handed over and the units ``handed`` to Redis's share.

        With S > 1 each shard gets an even share of both (their sums are the activity's),
        in two steps: every shard is frozen first (its stock key removed if it still holds
        what the picture saw), then every share is written (expecting no key). A round that
        loses a race stops with shards frozen — they answer "not warmed" (503 busy) until a
        later round writes them — and never leaves old figures beside new ones, which
        could count more units than exist."""
        log_lengths = [sum(1 for e in picture.log if e.shard == i) for i in range(self.shards)]
        if not self.sharded:
            return run_warmup(
                client,
                self.keys,
                remaining=remaining,
                loaded=loaded,
                expected=picture.stock,
                log_length=log_lengths[0],
                epoch=epoch,
                handover=(reserve, handed),
            )
        frozen = all(
            [  # a list, not a generator: every shard is frozen in the same round
                run_freeze(client, shard_keys, expected=expected, log_length=log_lengths[i])
                for i, (shard_keys, expected) in enumerate(zip(self.shard_keys, picture.shard_stocks, strict=True))
            ]
        )
        if not frozen:
            return False
        shares = zip(warmup_shares(remaining, self.shards), warmup_shares(loaded, self.shards), strict=True)
        return all(
            [
                run_warmup(
                    client,
                    shard_keys,
                    remaining=r,
                    loaded=n,
                    expected=None,
                    log_length=log_lengths[i],
                    epoch=epoch,
                    handover=(reserve, handed) if i == 0 else None,
                )
                for i, (shard_keys, (r, n)) in enumerate(zip(self.shard_keys, shares, strict=True))
            ]
        )

    def records_write(self, client: StockRedis, records: Mapping[int, str]) -> None:
        """Write shoppers' records (a warm-up restoring them); with S > 1 the restored
        claims name reservations, so none of them is pending any more."""
        by_target: dict[ActivityKeys, dict[int, str]] = {}
        for user_id, value in records.items():
            by_target.setdefault(self.users_of(user_id), {})[user_id] = value
        for target, mapping in by_target.items():
            items = list(mapping.items())
            for i in range(0, len(items), 1000):
                chunk = dict(items[i : i + 1000])
                client.hset(target.users, mapping=chunk)  # type: ignore[arg-type]  # int keys are fine for Redis
                if self.sharded:
                    client.zrem(target.pending, *chunk)

    def handover(self, client: StockRedis, *, released: int, reserve_left: int | None) -> int:
        """Bring the units the database has ``released`` to Redis's share into the stock
        (of shard 0 when S > 1: any shard may hold them), once each, and lower the reserve
        Redis counts to ``reserve_left`` (None: leave it). Returns the units added, -1 when
        not warmed."""
        return run_handover(client, self.keys, released=released, reserve_left=reserve_left)

    def units_left(self, client: StockRedis) -> UnitsLeft:
        """The units still for sale: Redis's stock and the reserve not handed over. With
        one key, as they were at one moment. With S > 1 the shards are read twice: the same
        restock counts both times mean no shard rose between the reads, so at the moment
        between them each held at most its first figure, and a zero is a fact (``settled``);
        a stock that keeps moving gives the last sum, unsettled. None when not warmed."""
        if not self.sharded:
            stock, reserve = client.mget([self.keys.stock, self.keys.reserve])
            units = None if stock is None else int(stock) + int(reserve or 0)
            return UnitsLeft(units, settled=True)
        figures = None
        for _ in range(3):
            figures = shard_figures(client, self.keys, self.shards)
            if figures.stocks is None:
                return UnitsLeft(None, settled=True)
            if shard_restocks(client, self.keys, self.shards) == figures.restocks:
                return UnitsLeft(figures.units, settled=True)
        assert figures is not None
        return UnitsLeft(figures.units, settled=False)

    def records_add(self, client: StockRedis, records: Mapping[int, str]) -> int:
        """Write each shopper's record unless they hold one already (HSETNX); returns how
        many were written."""
        pipe = client.pipeline(transaction=False)
        for user_id, value in records.items():
            pipe.hsetnx(self.users_of(user_id).users, str(user_id), value)
        return sum(pipe.execute()) if records else 0

    def records_clear(self, client: StockRedis, records: Mapping[int, str]) -> int:
        """Remove each shopper's record while it is still the one given (a compare-and-set);
        returns how many were removed."""
        return sum(
            run_claim_settle(client, self.users_of(user_id), user_id=user_id, expected=value, new="")
            for user_id, value in records.items()
        )

    def records_correct(self, client: StockRedis, written: Mapping[int, str], now: Mapping[int, str]) -> None:
        """Set each record in ``written`` to what ``now`` says (removed when the shopper
        holds nothing now), each only if it is still the one written (a compare-and-set:
        a script that changed it since knows better)."""
        for user_id, value in written.items():
            if now.get(user_id) != value:
                run_claim_settle(
                    client, self.users_of(user_id), user_id=user_id, expected=value, new=now.get(user_id, "")
                )

    def stock_keys_unlink(self, client: StockRedis) -> int:
        """UNLINK every stock key of this layout; one call per hash tag (one Cluster slot each)."""
        return sum(client.unlink(*part.all()) for part in self.stock_keys())


@dataclass(frozen=True)
class UnitsLeft:
    units: int | None  # None: not warmed
    settled: bool  # False: S > 1 and the shards kept moving between two reads

    @property
    def sold_out(self) -> bool:
        """Nothing left, as a fact about one moment."""
        return self.settled and self.units is not None and self.units <= 0


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    known = list(values)
    return None if None in known else sum(v for v in known if v is not None)
