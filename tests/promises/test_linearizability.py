"""The linearizability checker (tests/promises/linearizability.py) on its own: hand-written
histories it must accept and reject, a brute-force oracle it must agree with on small random
histories, and histories of a simulated correct shop (a counter under a lock, with random
delays between send, effect and receive) it must accept, however large. Pure Python, no
database."""

from __future__ import annotations

import heapq
import math
import random
import time
from dataclasses import dataclass
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.promises.linearizability import (
    CANCEL,
    DUPLICATE,
    ENDED,
    EXPIRY,
    NONE,
    NOT_STARTED,
    PURCHASE,
    RETURN,
    SOLD_OUT,
    TAKE,
    Op,
    check_linearizable,
    effect_of,
    sold_out_final_violations,
)

INF = math.inf


def win(who, send, receive):
    return Op(who, PURCHASE, send, receive, 202, "queued")


def sold_out(who, send, receive):
    return Op(who, PURCHASE, send, receive, 410, "sold_out")


def duplicate(who, send, receive):
    return Op(who, PURCHASE, send, receive, 409, "duplicate")


def cancel(who, send, receive, status=200):
    return Op(who, CANCEL, send, receive, status, "cancelled" if status == 200 else "not_cancellable")


def expiry(who, deadline, seen):
    return Op(who, EXPIRY, deadline, seen)


def both_ways(history, **kwargs):
    """The verdict with the certain-violation pass and by the search alone; they must agree."""
    first = check_linearizable(history, **kwargs)
    searched = check_linearizable(history, shortcuts=False, **kwargs)
    assert first.ok == searched.ok, (str(first), str(searched))
    return first, searched


# --- must accept -----------------------------------------------------------------------------


def test_a_sequential_sale():
    history = [win("a", 0, 1), win("b", 2, 3), sold_out("c", 4, 5), duplicate("a", 6, 7), sold_out("b", 8, 9)]
    first, searched = both_ways(history, units=2)
    assert first.ok and searched.ok


def test_concurrent_wins_and_a_sold_out_overlapping_the_last_win():
    history = [
        win("a", 0.0, 3.0),
        win("b", 0.5, 2.0),
        win("c", 1.0, 6.0),  # the last unit, answered late
        sold_out("d", 2.5, 3.5),  # overlaps c's win: c's unit may be gone by then
        sold_out("e", 7.0, 7.1),
    ]
    first, _ = both_ways(history, units=3)
    assert first.ok, first


def test_a_cancel_then_a_win():
    history = [
        win("a", 0, 1),
        sold_out("b", 1.5, 2),
        cancel("a", 3, 4),
        win("b", 5, 6),
        sold_out("c", 7, 8),
        win("a", 9, 10),  # no: nothing came back since c's sold_out
    ]
    assert not check_linearizable(history, units=1).ok
    first, _ = both_ways(history[:-1], units=1)
    assert first.ok, first


def test_a_sold_out_from_memory_within_the_bound():
    history = [win("a", 0, 1), cancel("a", 2.0, 2.1), sold_out("c", 2.5, 2.6)]
    first, _ = both_ways(history, units=1, memory_bound=1.0)
    assert first.ok, "sent 0.5 s after the unit came back: a memory of 1 s may still say sold out"
    assert sold_out_final_violations(history, 1.0) == []
    late, _ = both_ways(history, units=1, memory_bound=0.3)
    assert late.ok is False and late.op == history[2], late


def test_an_expiry_returns_the_unit_within_its_window():
    history = [win("a", 0, 1), sold_out("b", 2, 3), expiry("a", 10, 12), win("b", 11, 11.5)]
    first, _ = both_ways(history, units=1)
    assert first.ok, "the expiry may have happened at 10, before b's win at 11"
    early = [win("a", 0, 1), sold_out("b", 2, 3), expiry("a", 10, 12), win("b", 8, 9)]
    verdict, _ = both_ways(early, units=1)
    assert verdict.ok is False, "b won before the deadline of the only unit"


def test_no_answer_may_or_may_not_have_taken_effect():
    lost = Op("a", PURCHASE, 0, INF, None, None)
    took = [lost, sold_out("b", 2, 3), duplicate("a", 4, 5)]
    did_not = [lost, win("b", 2, 3)]
    assert both_ways(took, units=1)[0].ok
    assert both_ways(did_not, units=1)[0].ok
    assert both_ways([lost, win("b", 2, 3), win("c", 4, 5)], units=1)[0].ok is False


def test_busy_rate_limited_and_not_cancellable_change_nothing():
    history = [
        win("a", 0, 1),
        Op("b", PURCHASE, 1, 2, 503, "busy"),
        Op("c", PURCHASE, 1, 2, 429, "rate_limited"),
        cancel("b", 2, 3, status=409),
        sold_out("c", 4, 5),
    ]
    assert both_ways(history, units=1)[0].ok


def test_not_started_and_ended_against_the_sale_window():
    early = Op("a", PURCHASE, 1, 2, 403, NOT_STARTED)
    late = Op("a", PURCHASE, 9, 10, 403, ENDED)
    assert check_linearizable([early, late], units=1, start=1.5, end=9.5).ok
    verdict = check_linearizable([early], units=1, start=0.5, end=9.5)
    assert verdict.ok is False and "not_started" in verdict.explanation
    assert check_linearizable([late], units=1, start=0.5, end=10.5).ok is False


# --- must reject -------------------------------------------------------------------------------


def test_an_oversell():
    history = [win("a", 0, 1), win("b", 0.5, 1.5), win("c", 1, 2)]
    first, searched = both_ways(history, units=2)
    assert first.ok is False and "oversell" in first.explanation, first
    assert searched.op in history and "could not be placed" in searched.explanation, searched


def test_a_sold_out_then_a_win_with_no_unit_back_in_between():
    """The bug: Redis's share sold out (410), then the database reserve joins it and sells to
    whoever is still retrying."""
    history = [win(s, 0, 1) for s in "abc"] + [sold_out("d", 2, 2.1)] + [win("d", 6, 7), win("e", 6.5, 7.5)]
    first, searched = both_ways(history, units=5, memory_bound=1.0)
    assert first.ok is False and first.op == history[3], first
    assert "at least 2 unit(s) of 5 were certainly left" in first.explanation, first
    assert searched.op == history[3] and "at most 3 pending purchase(s)" in searched.explanation, searched
    assert len(sold_out_final_violations(history, 1.0)) == 2
    # One unit came back after the answer: one of the two is still one too many.
    back = [*history[:3], cancel("a", 3, 4), *history[3:]]
    assert len(sold_out_final_violations(back, 1.0)) == 1


def test_a_duplicate_after_the_shoppers_cancel_finished_beyond_the_bound():
    history = [win("a", 0, 1), cancel("a", 2, 3), duplicate("a", 5, 5.1)]
    first, searched = both_ways(history, units=3, memory_bound=1.0)
    assert first.ok is False and first.op == history[2], first
    assert "its last unit came back by" in first.explanation
    assert "never held a unit" in searched.explanation, searched
    # Within the bound a memory may still say duplicate.
    within = [win("a", 0, 1), cancel("a", 2, 3), duplicate("a", 3.5, 3.6)]
    assert both_ways(within, units=3, memory_bound=1.0)[0].ok


def test_two_live_units_for_one_shopper():
    history = [win("a", 0, 1), win("a", 2, 3)]
    first, searched = both_ways(history, units=3)
    assert first.ok is False and "held 2 units" in first.explanation, first
    assert searched.op == history[1]


def test_a_sold_out_while_units_were_certainly_left():
    history = [win("a", 0, 1), sold_out("b", 2, 3), win("c", 4, 5)]
    first, _ = both_ways(history, units=3)
    assert first.ok is False and first.op == history[1]


def test_refusals_satisfiable_alone_but_not_together():
    """Why refusals are not checked one by one against the range of states: each duplicate
    alone fits some placement of the wins and cancels, both together none (one unit; both
    cancels late, so a and b cannot each hold it within [1, 2])."""
    common = [win("a", 0, 10), cancel("a", 5, 6), win("b", 0, 10), cancel("b", 5, 6)]
    d_a, d_b = duplicate("a", 1, 2), duplicate("b", 1, 2)
    assert both_ways([*common, d_a], units=1)[0].ok
    assert both_ways([*common, d_b], units=1)[0].ok
    first, _ = both_ways([*common, d_a, d_b], units=1)
    assert first.ok is False and first.how == "search", first


def test_the_budget_makes_it_inconclusive_not_wrong():
    history = [win(i, 0, 10) for i in range(12)] + [sold_out("z", 5, 6)]
    verdict = check_linearizable(history, units=11, budget=3, shortcuts=False)
    assert verdict.ok is None and "budget" in verdict.explanation


# --- a brute-force oracle, and a simulated correct shop ------------------------------------------


def oracle(history, units, bound) -> bool:
    """Every order of the operations, tried: exact by definition (small histories only)."""
    items = []
    for op in history:
        effect, certain = effect_of(op)
        if effect in (NONE, NOT_STARTED, ENDED):
            continue
        lo = op.send - bound if effect in (SOLD_OUT, DUPLICATE) else op.send
        items.append((effect, op.shopper, lo, op.receive if certain else INF))

    @cache
    def legal(pending: frozenset, count: int, holders: frozenset) -> bool:
        if all(items[i][3] == INF for i in pending):
            return True
        first_end = min(items[i][3] for i in pending)
        for i in pending:
            effect, who, lo, _ = items[i]
            if lo > first_end:
                continue
            rest = pending - {i}
            if effect == TAKE and count >= 1 and who not in holders:
                if legal(rest, count - 1, holders | {who}):
                    return True
            elif effect == RETURN and who in holders:
                if legal(rest, count + 1, holders - {who}):
                    return True
            elif (effect == SOLD_OUT and count == 0) or (effect == DUPLICATE and who in holders):
                if legal(rest, count, holders):
                    return True
        return False

    return legal(frozenset(range(len(items))), units, frozenset())


@dataclass(frozen=True)
class Step:
    gap: float  # think time before sending
    to_effect: float  # send -> the shop acts
    to_answer: float  # the shop acts -> the answer arrives
    cancel: bool  # a cancel if the shopper holds a unit, else a purchase
    from_memory: bool  # the shop may answer from a memory (within the bound)
    lost: bool  # the answer never arrives


def simulate(units: int, shoppers: list[list[Step]], *, bound: float, pay_timeout: float | None) -> list[Op]:
    """A correct shop: a counter and the holders under one lock, each request acting at one
    moment of its window; memories that answer sold_out / duplicate with what was true at
    most ``bound`` before the request; unpaid units expiring ``pay_timeout`` after the win."""
    events = []  # (time, seq, kind, payload)
    seq = 0
    for who, steps in enumerate(shoppers):
        t = 0.0
        for step in steps:
            send = t + step.gap
            acts = send + step.to_effect
            t = acts + step.to_answer
            events.append((acts, seq, "request", (who, step, send, t)))
            seq += 1
    heapq.heapify(events)
    count, holding = units, {}  # shopper -> the win's id while they hold it
    last_empty, last_held = -INF, {}
    history = []
    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == "expiry":
            who, win_id, deadline = payload
            if holding.get(who) == win_id:
                del holding[who]
                count += 1
                history.append(expiry(who, deadline, now + 0.05))
            continue
        who, step, send, receive = payload
        if step.cancel and who in holding:
            del holding[who]
            count += 1
            status, code, op = 200, "cancelled", CANCEL
        elif step.cancel:
            status, code, op = 409, "not_cancellable", CANCEL
        elif step.from_memory and last_empty >= send - bound:
            status, code, op = 410, "sold_out", PURCHASE
        elif step.from_memory and last_held.get(who, -INF) >= send - bound:
            status, code, op = 409, "duplicate", PURCHASE
        elif who in holding:
            last_held[who] = now
            status, code, op = 409, "duplicate", PURCHASE
        elif count >= 1:
            count -= 1
            holding[who] = seq
            last_held[who] = now
            status, code, op = 202, "queued", PURCHASE
            if pay_timeout is not None:
                deadline = now + pay_timeout
                heapq.heappush(events, (deadline + 0.01, seq, "expiry", (who, seq, deadline)))
            seq += 1
        else:
            status, code, op = 410, "sold_out", PURCHASE
        if count == 0:
            last_empty = now
        if step.lost:
            history.append(Op(who, op, send, INF))
        else:
            history.append(Op(who, op, send, receive, status, code))
    return history


tenths = st.integers(0, 12).map(lambda n: n / 10)  # ties happen: they are concurrency too
steps = st.builds(
    Step,
    gap=tenths,
    to_effect=tenths,
    to_answer=tenths,
    cancel=st.booleans(),
    from_memory=st.booleans(),
    lost=st.sampled_from([False] * 9 + [True]),
)
shops = st.fixed_dictionaries(
    {
        "units": st.integers(1, 4),
        "shoppers": st.lists(st.lists(steps, min_size=1, max_size=6), min_size=1, max_size=6),
        "bound": st.sampled_from([0.0, 0.5, 1.0]),
        "pay_timeout": st.sampled_from([None, 0.7, 2.0]),
    }
)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


@FAST
@given(shop=shops)
def test_every_history_of_a_correct_shop_is_accepted(shop):
    history = simulate(**shop)
    for shortcuts in (True, False):
        verdict = check_linearizable(history, units=shop["units"], memory_bound=shop["bound"], shortcuts=shortcuts)
        assert verdict.ok, (str(verdict), history)
    assert sold_out_final_violations(history, shop["bound"]) == []


def mutate(history: list[Op], i: int, how: str) -> list[Op]:
    op = history[i]
    answers = {
        "sold_out": (PURCHASE, 410, "sold_out"),
        "duplicate": (PURCHASE, 409, "duplicate"),
        "won": (PURCHASE, 202, "queued"),
        "cancelled": (CANCEL, 200, "cancelled"),
    }
    kind, status, code = answers[how]
    receive = op.receive if op.receive != INF else op.send + 0.5
    return [*history[:i], Op(op.shopper, kind, op.send, receive, status, code), *history[i + 1 :]]


@FAST
@given(shop=shops, data=st.data())
def test_the_checker_agrees_with_the_oracle_on_changed_answers(shop, data):
    history = simulate(**shop)
    small = history[:9]
    i = data.draw(st.integers(0, len(small) - 1))
    changed = mutate(small, i, data.draw(st.sampled_from(["sold_out", "duplicate", "won", "cancelled"])))
    expected = oracle(changed, shop["units"], shop["bound"])
    for shortcuts in (True, False):
        verdict = check_linearizable(changed, units=shop["units"], memory_bound=shop["bound"], shortcuts=shortcuts)
        assert verdict.ok == expected, (str(verdict), expected, changed)


def many_shoppers(rng: random.Random, n: int, length: int) -> list[list[Step]]:
    def step():
        return Step(
            gap=rng.uniform(0.2, 1.0),
            to_effect=rng.uniform(0, 0.05),
            to_answer=rng.uniform(0, 0.05),
            cancel=rng.random() < 0.15,
            from_memory=rng.random() < 0.5,
            lost=rng.random() < 0.002,
        )

    return [[step() for _ in range(length)] for _ in range(n)]


def test_a_sale_of_thousands_of_operations_and_100_clients_is_checked_fast():
    rng = random.Random(20260509)
    history = simulate(200, many_shoppers(rng, 120, 30), bound=1.0, pay_timeout=4.0)
    assert len(history) > 3500
    began = time.monotonic()
    verdict = check_linearizable(history, units=200, memory_bound=1.0)
    took = time.monotonic() - began
    assert verdict.ok, str(verdict)
    assert took < 20, f"{took:.1f} s for {len(history)} operations"
    searched = check_linearizable(history, units=200, memory_bound=1.0, shortcuts=False)
    assert searched.ok, str(searched)


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_sold_out_where_units_were_certainly_left_is_found_in_a_large_sale(seed, data):
    """Flip one 202 of a busy sale into sold_out at a moment when, whatever the order, units
    were left: rejected, by the certain pass and by the search alone."""
    rng = random.Random(seed)
    history = simulate(40, many_shoppers(rng, 60, 12), bound=1.0, pay_timeout=3.0)
    wins = [i for i, op in enumerate(history) if op.status == 202]
    # Early wins: the first 20 of 40 units, when at least 20 are certainly left.
    starts = sorted(op.send for op in history if op.op == PURCHASE)
    early = [i for i in wins if sum(1 for s in starts if s <= history[i].receive) <= 20]
    i = data.draw(st.sampled_from(early))
    # The shopper then leaves: their later cancel or duplicate would need the unit they lost.
    changed = [op for j, op in enumerate(mutate(history, i, "sold_out")) if j <= i or op.shopper != history[i].shopper]
    first = check_linearizable(changed, units=40, memory_bound=1.0)
    assert first.ok is False and first.op == changed[i], str(first)
    searched = check_linearizable(changed, units=40, memory_bound=1.0, shortcuts=False)
    assert searched.ok is False and searched.op == changed[i], str(searched)


@pytest.mark.parametrize("how", ["won", "duplicate"])
def test_one_changed_answer_in_a_large_sale_is_found(how):
    """A 202 or a 409 for a shopper who certainly holds nothing / already holds: rejected."""
    rng = random.Random(7)
    units = 60
    history = simulate(units, many_shoppers(rng, 100, 25), bound=1.0, pay_timeout=None)
    if how == "won":  # a second 202 for a shopper whose first 202 they never gave back
        first_wins = {}
        for i, op in enumerate(history):
            if op.status == 202:
                first_wins.setdefault(op.shopper, i)
        holder = next(s for s, i in first_wins.items() if not any(o.shopper == s and o.op == CANCEL for o in history))
        i = next(
            j for j, op in enumerate(history) if op.shopper == holder and op.status == 409 and j > first_wins[holder]
        )
    else:  # a 409 duplicate for a shopper who had not tried to win anything yet
        i = next(
            j
            for j, op in enumerate(history)
            if op.status == 410
            and not any(
                o.shopper == op.shopper and o.op == PURCHASE and o.status in (202, None) and o.send <= op.receive
                for o in history
            )
        )
    changed = mutate(history, i, how)
    verdict = check_linearizable(changed, units=units, memory_bound=1.0)
    assert verdict.ok is False and verdict.op == changed[i], str(verdict)
