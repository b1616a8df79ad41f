"""The verdict's checks on histories written by hand: what they must accept and reject."""

from rehearsal.verdict import honest_sold_out, judge, one_live_order_each, units_sold_once

SALE = {"total_stock": 2, "per_user_limit": 1, "start_at": "2026-01-01T00:00:00Z"}


def answer(t, name, status, code="", shopper=0, ms=10.0):
    return {"t": t, "ms": ms, "n": name, "s": status, "c": code, "u": shopper}


def order(no, status="pending", reason="", deadline="2026-01-01T00:01:00Z"):
    return {"order_no": no, "quantity": 1, "status": status, "cancel_reason": reason, "pay_deadline": deadline}


def live_json(paid=0, pending=2, left=0, unordered=0):
    return {
        "orders": {"paid_units": paid, "pending_units": pending},
        "left": left,
        "reserved_not_ordered": unordered,
    }


def test_a_sold_out_before_a_later_win_with_no_return_is_red():
    lines = [
        answer(100.0, "purchase", 202, "queued", 1),
        answer(101.0, "purchase", 410, "sold_out", 2),
        answer(103.0, "purchase", 202, "queued", 3),  # a unit sold after "none left", none came back
    ]
    check = honest_sold_out(lines, {1: [order("a")], 3: [order("b")]}, live_json(), 0.0)
    assert not check.ok and "1 of 1 sold_out" in check.detail


def test_a_sold_out_then_a_cancel_then_a_win_is_green():
    lines = [
        answer(100.0, "purchase", 202, "queued", 1),
        answer(100.5, "purchase", 202, "queued", 4),
        answer(101.0, "purchase", 410, "sold_out", 2),
        answer(102.0, "cancel", 200, "", 1),
        answer(103.0, "purchase", 202, "queued", 3),
    ]
    orders = {1: [order("a", "cancelled", "shopper")], 4: [order("c")], 3: [order("b")]}
    assert honest_sold_out(lines, orders, live_json(), 0.0).ok


def test_a_sold_out_while_units_stay_unsold_is_red():
    lines = [answer(100.0, "purchase", 202, "queued", 1), answer(101.0, "purchase", 410, "sold_out", 2)]
    check = honest_sold_out(lines, {1: [order("a")]}, live_json(pending=1, left=1), 0.0)
    assert not check.ok


def test_two_live_orders_of_one_shopper_and_an_order_listed_twice_are_red():
    assert not one_live_order_each({1: [order("a"), order("b")]}, per_user=1).ok
    assert one_live_order_each({1: [order("a", "cancelled"), order("b")]}, per_user=1).ok
    assert not units_sold_once({1: [order("a")], 2: [order("a")]}, live_json(), SALE).ok
    assert not units_sold_once({1: [order("a")]}, live_json(pending=1, left=0), SALE).ok  # a unit unaccounted for
    assert units_sold_once({1: [order("a")], 2: [order("b")]}, live_json(), SALE).ok


def test_a_202_without_an_order_is_red_and_capacity_is_the_best_second_under_the_target():
    lines = [answer(100.0 + i / 10, "flag", 200, ms=5.0) for i in range(10)]
    lines += [answer(101.0 + i / 100, "flag", 200, ms=900.0) for i in range(50)]
    lines += [answer(100.5, "purchase", 202, "queued", 1), answer(100.6, "purchase", 202, "queued", 2)]
    verdict = judge(
        lines=lines,
        orders={1: [order("a")]},
        live=live_json(pending=1, unordered=1),
        sale=SALE,
        clock_offset=0.0,
        p99_target_ms=100,
    )
    assert [c.name for c in verdict.checks if not c.ok] == ["every 202 became an order"]
    assert verdict.figures["capacity_rps"] == 12 and verdict.figures["peak_rps"] == 50
