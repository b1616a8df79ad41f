"""Are a flash sale's answers linearizable? A model of the shop, checked against a history of
real requests in real time order (Wing & Gong; Lowe's just-in-time search, as Porcupine and
Knossos do it).

The model, for ONE sale: ``units`` units; each shopper holds at most one live unit.

==========================  ========  ================================================
what was recorded            effect    when it may be placed (its *window*)
==========================  ========  ================================================
purchase 202 ``queued``      TAKE      [send, receive]; needs a unit left and a shopper
                                       holding none; the shopper then holds one
purchase 410 ``sold_out``    SOLD_OUT  [send - memory_bound, receive]; no unit left
purchase 409 ``duplicate``   DUPLICATE [send - memory_bound, receive]; the shopper holds one
purchase 403 ``not_started``  (time)   valid if send < the sale's start
purchase 403 ``ended``        (time)   valid if receive > the sale's end
cancel 200                   RETURN    [send, receive]; the shopper's unit comes back
expiry (op ``expiry``)       RETURN    [the order's pay deadline, the first moment the
                                       test saw it cancelled]
failed reservation           RETURN    (op ``release``) as an expiry
purchase 503 ``busy``, 429,   none     no effect, no constraint
other 4xx, cancel 409, pay
no answer, 503                TAKE or  may have taken effect or not: [send, +inf),
``outcome_unknown``, another  RETURN?   placed anywhere after ``send`` or never
5xx
==========================  ========  ================================================

A refusal answered from a process memory may describe a moment up to ``memory_bound`` seconds
before its request was sent (API.md: memories are at most 1 s old), so the START of the
SOLD_OUT and DUPLICATE windows is moved back by it. Wins and returns are not widened.

``check_linearizable`` decides whether some order of the operations, each placed at one
moment of its window, is a legal run of the model (a refusal's condition holding at its
moment). It is exact; its parts, in order:

1. **Certain violations** (``_certain_violations``), O(n log n): necessary conditions read off
   the windows alone, each a bound every linearization obeys. With W(t), R(t) the TAKEs
   and RETURNs placed before t, in ANY linearization
   ``#{TAKE ends < t} <= W(t) <= #{TAKE starts <= t}`` and the same for R. So:
   an oversell (``units - #TAKEs ended + #RETURNs started < 0``), a ``sold_out`` whose
   window has at every moment a unit certainly left, a ``duplicate`` whose shopper certainly
   held nothing throughout, a shopper certainly holding two units, or a return of a unit
   not held. Each is a proof that no linearization exists, with a plain explanation; the
   bugs worth finding mostly end here, without any search. ``certain_violations`` lists
   them all (for reports).
2. **Per-shopper projections** (``_shopper_projections``): each shopper's own operations
   (their ``sold_out`` answers aside) against the model with unlimited units, each a small
   search. Necessary (drop everyone else from a linearization of the whole and what is
   left is one of the projection); it catches a shopper's impossible history in a few
   steps, where the whole search would first try every order of everybody else's
   operations around it.
3. **The search** (``_Search``): a depth-first search over the *minimal* pending operations
   (those no other pending operation must precede: ``start <= min(end of the pending)``),
   memoising every node it has explored, ``(linearised set as a bitmask, model state)``;
   a node seen again was a dead end. The bitmask is kept relative to the first
   unlinearised operation (all before it are linearised), so a key is the size of the
   concurrency window, not of the history. Refusals change no state, and that makes most
   of them free: *a refusal that is minimal and whose condition holds in the current state
   is placed at once, without branching* (``eager``). Proof: take any legal completion from
   this node and move the refusal to its front. The state every other operation sees is
   unchanged (the refusal changes nothing); no pending operation had to precede it (it is
   minimal: its start <= every pending end); and whatever had to follow it still does. So
   the node has a legal completion iff the node with the refusal placed has one: when that
   child fails, its parent fails too, and the search backtracks past both. Only TAKEs and
   RETURNs branch (TAKEs first, earliest deadline first: the order that keeps units low,
   which refusals need, while the deadlines keep it legal). A look-ahead cuts a node as
   soon as some pending operation can never be placed (``_Search``'s docstring) — again a
   necessary condition, so still exact.
4. **A step budget**: past it the answer is ``inconclusive`` (``ok is None``), never a guess.
   Honest histories need about one step per operation (real ones of 4,000 operations:
   ~2,500 steps, well under a second). The search alone can take exponential time to
   refute a history that parts 1 and 2 let through (it must try the orders of everything
   concurrent with the culprit): that is where the budget answers ``inconclusive``.

Where it is generous rather than exact, it is so on purpose and towards acceptance: ties in
time count as concurrent; an operation without an answer may have taken effect or not.

The checker does NOT check refusals separately against a range of the unit count after the
wins and returns are placed: that would not be exact. Two refusals may each be satisfiable
by some placement of the wins and returns and yet by no single one (e.g. one unit,
shoppers a and b, a's cancel only possible late: ``duplicate`` of a and of b in the same
early second cannot both hold). Eager placement inside the one search is what keeps it
exact and still cheap.

On a violation the explanation names the operation that could not be placed, its window,
and what the model allowed while it could have been placed (the units left, whether its
shopper held one), with the operations placed just before it.

``sold_out_final_violations`` is the product statement's own, simpler check: units sold to
requests that began after a ``sold_out`` was received, beyond the units that came back after
that answer's (widened) moment.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# --- the recorded history ------------------------------------------------------------------

PURCHASE, CANCEL, EXPIRY, RELEASE, PAY = "purchase", "cancel", "expiry", "release", "pay"


@dataclass(frozen=True)
class Op:
    """One recorded operation: who, what, its real send and receive times (time.monotonic
    seconds; ``receive`` is ``math.inf`` when no answer came) and the answer. For an
    ``expiry`` (or ``release``) ``send`` is the order's pay deadline and ``receive`` the
    first moment the test saw it cancelled."""

    shopper: object
    op: str
    send: float
    receive: float
    status: int | None = None
    code: str | None = None
    note: str = ""

    def describe(self, t0: float = 0.0) -> str:
        answer = "no answer" if self.status is None else f"{self.status} {self.code or ''}".strip()
        note = f" ({self.note})" if self.note else ""
        return f"{self.op} by shopper {self.shopper} [{_t(self.send, t0)}, {_t(self.receive, t0)}] -> {answer}{note}"


def _t(value: float, t0: float) -> str:
    return "+inf" if value == math.inf else f"{value - t0:+.3f}s"


TAKE, RETURN, SOLD_OUT, DUPLICATE, NOT_STARTED, ENDED, NONE = (
    "take",
    "return",
    "sold_out",
    "duplicate",
    "not_started",
    "ended",
    "none",
)
_NO_EFFECT_PURCHASE_STATUSES = {400, 401, 403, 404, 405, 415, 429, 503}


def effect_of(op: Op) -> tuple[str, bool]:
    """(the model's effect, certain?) of one recorded operation; an uncertain TAKE or
    RETURN may have happened or not."""
    if op.op == PURCHASE:
        if op.status == 202:
            return TAKE, True
        if op.status == 410 and op.code == "sold_out":
            return SOLD_OUT, True
        if op.status == 409 and op.code == "duplicate":
            return DUPLICATE, True
        if op.status == 403 and op.code in (NOT_STARTED, ENDED):
            return op.code, True
        if op.status in _NO_EFFECT_PURCHASE_STATUSES and not (op.status == 503 and op.code != "busy"):
            return NONE, True  # refused before the stock was touched, or busy: no effect, no claim
        return TAKE, False  # no answer, or an answer that does not say: it may have reserved
    if op.op == CANCEL:
        if op.status == 200:
            return RETURN, True
        if (op.status is not None and op.status < 500) or (op.status == 503 and op.code == "busy"):
            return NONE, True
        return RETURN, False
    if op.op in (EXPIRY, RELEASE):
        return RETURN, op.receive != math.inf
    return NONE, True  # pay, reads


# --- the verdict -----------------------------------------------------------------------------


@dataclass
class Verdict:
    """``ok``: True linearizable, False not (with a proof or an exhausted search), None
    inconclusive (the step budget ran out)."""

    ok: bool | None
    explanation: str
    op: Op | None = None  # the operation that could not be placed
    steps: int = 0
    how: str = ""  # "certain" (a necessary condition failed) or "search"

    def __str__(self) -> str:
        state = {True: "linearizable", False: "NOT linearizable", None: "inconclusive"}[self.ok]
        return f"{state} ({self.how}, {self.steps} steps): {self.explanation}"


# --- the model's operations --------------------------------------------------------------------


@dataclass(frozen=True)
class _M:
    effect: str
    who: int  # the shopper's index
    start: float
    end: float  # math.inf: optional (may be placed or not)
    op: Op


def _model_ops(history: Iterable[Op], memory_bound: float) -> tuple[list[_M], dict[object, int], list[Op]]:
    """The operations that matter to the model, each with its window; the time refusals apart."""
    shoppers: dict[object, int] = {}
    ops, timed = [], []
    for op in history:
        effect, certain = effect_of(op)
        if effect == NONE:
            continue
        if effect in (NOT_STARTED, ENDED):
            timed.append(op)
            continue
        who = shoppers.setdefault(op.shopper, len(shoppers))
        if effect in (SOLD_OUT, DUPLICATE):
            ops.append(_M(effect, who, op.send - memory_bound, op.receive, op))
        else:
            ops.append(_M(effect, who, op.send, op.receive if certain else math.inf, op))
    return ops, shoppers, timed


# --- 1. certain violations -----------------------------------------------------------------------


class _Counts:
    """Sorted starts and ends of some operations: how many started / ended by a time."""

    def __init__(self, ops: Iterable[_M]):
        ops = list(ops)
        self.starts = sorted(o.start for o in ops)
        self.ends = sorted(o.end for o in ops if o.end != math.inf)

    def started_by(self, t: float) -> int:  # start <= t
        return bisect.bisect_right(self.starts, t)

    def ended_before(self, t: float) -> int:  # end < t
        return bisect.bisect_left(self.ends, t)

    def ended_by(self, t: float) -> int:  # end <= t
        return bisect.bisect_right(self.ends, t)


def _certain_violations(ops: list[_M], units: int, t0: float) -> list[tuple[str, str, Op]]:
    """Every necessary condition that fails: (kind, explanation, operation), in the order of
    the operations' send times. Ties in time count as concurrent (either order allowed)."""
    found: list[tuple[str, str, Op]] = []
    takes = [o for o in ops if o.effect == TAKE]
    returns = [o for o in ops if o.effect == RETURN]
    all_takes, all_returns = _Counts(takes), _Counts(returns)
    by_shopper: dict[int, tuple[_Counts, _Counts]] = {}
    take_of, ret_of = defaultdict(list), defaultdict(list)
    for o in takes:
        take_of[o.who].append(o)
    for o in returns:
        ret_of[o.who].append(o)
    for who in set(take_of) | set(ret_of):
        by_shopper[who] = (_Counts(take_of[who]), _Counts(ret_of[who]))

    # Oversell: after a 202 ended at e, units - (202s ended by e) + (returns begun by e) >= 0.
    for o in sorted((o for o in takes if o.end != math.inf), key=lambda o: o.end):
        sold, back = all_takes.ended_by(o.end), all_returns.started_by(o.end)
        if units - sold + back < 0:
            found.append(
                (
                    "oversell",
                    f"oversell: by {_t(o.end, t0)} {sold} purchases had been answered 202 and at most {back} "
                    f"units could have come back, {sold - back} units sold of {units}; the last of them: "
                    f"{o.op.describe(t0)}",
                    o.op,
                )
            )
            break  # one is enough: every later 202 would repeat it

    for o in ops:
        if o.effect == SOLD_OUT:
            # The fewest units the model can have left at a moment t of the window: every
            # purchase begun by t won, only the returns ended before t came back.
            ends = all_returns.ends
            points = [o.end, *ends[bisect.bisect_left(ends, o.start) : bisect.bisect_right(ends, o.end)]]
            least = min(units - all_takes.started_by(t) + all_returns.ended_before(t) for t in points)
            if least > 0:
                found.append(
                    (
                        "sold_out",
                        f"{o.op.describe(t0)}: sold_out, but at every moment of its window "
                        f"[{_t(o.start, t0)}, {_t(o.end, t0)}] (memory bound included) at least {least} "
                        f"unit(s) of {units} were certainly left ({all_takes.started_by(o.end)} purchases at most "
                        f"could have won by its answer, {all_returns.ended_before(o.end)} units certainly back)",
                        o.op,
                    )
                )
        elif o.effect == DUPLICATE:
            own_takes, own_returns = by_shopper.get(o.who, (_Counts(()), _Counts(())))
            ends = own_returns.ends
            points = [o.end, *ends[bisect.bisect_left(ends, o.start) : bisect.bisect_right(ends, o.end)]]
            most = max(own_takes.started_by(t) - own_returns.ended_before(t) for t in points)
            if most < 1:
                last_back = [r for r in ret_of[o.who] if r.end < o.start]
                detail = (
                    f"; its last unit came back by {_t(max(r.end for r in last_back), t0)} "
                    f"({max(last_back, key=lambda r: r.end).op.describe(t0)})"
                    if last_back
                    else "; it never won"
                )
                found.append(
                    (
                        "duplicate",
                        f"{o.op.describe(t0)}: duplicate, but the shopper certainly held no unit at any moment of its "
                        f"window [{_t(o.start, t0)}, {_t(o.end, t0)}] (memory bound included){detail}",
                        o.op,
                    )
                )

    for who, (own_takes, own_returns) in by_shopper.items():
        for o in sorted((o for o in take_of[who] if o.end != math.inf), key=lambda o: o.end):
            held = own_takes.ended_by(o.end) - own_returns.started_by(o.end)
            if held >= 2:
                found.append(
                    (
                        "two_units",
                        f"shopper {o.op.shopper} certainly held {held} units at {_t(o.end, t0)}: "
                        f"{o.op.describe(t0)} won with no return of theirs that could come between",
                        o.op,
                    )
                )
        for o in sorted((o for o in ret_of[who] if o.end != math.inf), key=lambda o: o.end):
            if own_returns.ended_by(o.end) - own_takes.started_by(o.end) >= 1:
                found.append(
                    ("unheld_return", f"{o.op.describe(t0)}: a unit came back that the shopper could not hold", o.op)
                )
    return sorted(found, key=lambda f: (f[2].send, f[2].receive))


def _time_violations(timed: list[Op], start: float | None, end: float | None, t0: float) -> tuple[str, Op] | None:
    for op in timed:
        if op.code == NOT_STARTED and start is not None and not op.send < start:
            return f"{op.describe(t0)}: not_started, but the sale started at {_t(start, t0)}", op
        if op.code == ENDED and end is not None and not op.receive > end:
            return f"{op.describe(t0)}: ended, but the sale ends at {_t(end, t0)}", op
    return None


# --- 2. the search -------------------------------------------------------------------------------

_SUCCESS, _NEW, _FAILED = "success", "new", "failed"


@dataclass
class _Frame:
    base: tuple  # the state before this node's eager refusals (restored when it is left)
    state: tuple  # the state at this node (restored after a child failed)
    forced: list[int]
    branch: list  # positions (int) of finite operations, or ("opt", j)
    i: int = 0
    applied: object = None


@dataclass
class _Best:
    done: int = -1
    op: int = -1  # the operation that could not be placed (a position)
    dead: str = ""  # why the look-ahead found it never placeable (else: the earliest pending end)
    recent: list = field(default_factory=list)


class _Search:
    """Lowe's just-in-time linearisation search with memoisation, eager refusals and a
    look-ahead that cuts a node as soon as some pending operation can never be placed:

    * an operation of shopper s that needs s to hold a unit (DUPLICATE, RETURN) while s holds
      none, with no pending TAKE of s that could come before its end (start <= its end); or
      a TAKE of s while s holds one, with no such pending RETURN of s (checked for s each
      time s's state changes, and for every shopper at the root);
    * a minimal SOLD_OUT with c units left and fewer than c pending TAKEs that could come
      before its end; a minimal TAKE with none left and no such pending RETURN.

    Each is a necessary condition of every completion (only operations placed before X can
    change the state X sees, and an operation can precede X only if it starts by X's end),
    so cutting there is exact; it turns the exponential walk under a node whose fate is
    already sealed into one step."""

    def __init__(self, ops: list[_M], units: int, budget: int):
        finite = sorted((o for o in ops if o.end != math.inf), key=lambda o: (o.start, o.end))
        self.ops = finite
        self.opt = sorted((o for o in ops if o.end == math.inf), key=lambda o: o.start)
        self.n = len(finite)
        self.lin = bytearray(self.n)
        self.optlin = bytearray(len(self.opt))
        self.refusal = [o.effect in (SOLD_OUT, DUPLICATE) for o in finite]
        self.units, self.budget = units, budget
        self.starts = [o.start for o in finite]
        # TAKEs / RETURNs among the first i operations (in start order).
        self.takes_before, self.returns_before = [0], [0]
        for o in finite:
            self.takes_before.append(self.takes_before[-1] + (o.effect == TAKE))
            self.returns_before.append(self.returns_before[-1] + (o.effect == RETURN))
        self.of_shopper: dict[int, list[int]] = defaultdict(list)
        self.opt_of_shopper: dict[int, list[int]] = defaultdict(list)
        for p, o in enumerate(finite):
            self.of_shopper[o.who].append(p)
        for j, o in enumerate(self.opt):
            self.opt_of_shopper[o.who].append(j)
        # The state: (bits, optbits, count, holders, lo, done); lo is the first unlinearised position.
        self.bits = self.optbits = self.holders = 0
        self.count, self.lo, self.done = units, 0, 0
        self.seen: set[tuple] = set()
        self.steps = 0
        self.path: list = []  # the linearised operations, in order
        self.best = _Best()
        # While each operation could have been placed: the fewest and most units left, and
        # whether its shopper was seen holding a unit / holding none.
        self.low = [math.inf] * self.n
        self.high = [-math.inf] * self.n
        self.seen_holding = bytearray(self.n)
        self.seen_free = bytearray(self.n)

    # the model
    def _holds(self, o: _M) -> bool:
        if o.effect == SOLD_OUT:
            return self.count <= 0
        return bool(self.holders >> o.who & 1)  # DUPLICATE

    def _can(self, o: _M) -> bool:
        held = self.holders >> o.who & 1
        return (self.count >= 1 and not held) if o.effect == TAKE else bool(held)

    def _apply(self, o: _M) -> None:
        if o.effect == TAKE:
            self.count -= 1
            self.holders |= 1 << o.who
        else:
            self.count += 1
            self.holders &= ~(1 << o.who)

    def _state(self) -> tuple:
        return (self.bits, self.optbits, self.count, self.holders, self.lo, self.done)

    def _restore(self, state: tuple) -> None:
        self.bits, self.optbits, self.count, self.holders, self.lo, self.done = state

    def _linearise(self, p: int) -> None:
        self.lin[p] = 1
        self.bits |= 1 << p
        self.done += 1
        self.path.append(p)
        while self.lo < self.n and self.lin[self.lo]:
            self.lo += 1

    def _unlinearise(self, p: int) -> None:
        self.lin[p] = 0  # bits, done and lo come back with the saved state
        self.path.pop()

    def _window(self) -> tuple[list[int], float]:
        """The minimal pending finite operations and the earliest pending end."""
        ops, lin = self.ops, self.lin
        cands, min_end = [], math.inf
        p = self.lo
        count, holders = self.count, self.holders
        while p < self.n:
            o = ops[p]
            if o.start > min_end:
                break
            if not lin[p]:
                cands.append(p)
                if o.end < min_end:
                    min_end = o.end
                if count < self.low[p]:
                    self.low[p] = count
                if count > self.high[p]:
                    self.high[p] = count
                if holders >> o.who & 1:
                    self.seen_holding[p] = 1
                else:
                    self.seen_free[p] = 1
            p += 1
        return cands, min_end

    # the look-ahead
    def _shopper_dead(self, who: int) -> tuple[int, str] | None:
        """A pending operation of this shopper that no pending operation of theirs can enable."""
        first_take = first_return = math.inf
        pending = []
        for p in self.of_shopper.get(who, ()):
            if not self.lin[p]:
                o = self.ops[p]
                pending.append(p)
                if o.effect == TAKE:
                    first_take = min(first_take, o.start)
                elif o.effect == RETURN:
                    first_return = min(first_return, o.start)
        for j in self.opt_of_shopper.get(who, ()):
            if not self.optlin[j]:
                o = self.opt[j]
                if o.effect == TAKE:
                    first_take = min(first_take, o.start)
                else:
                    first_return = min(first_return, o.start)
        held = self.holders >> who & 1
        for p in pending:
            o = self.ops[p]
            if held and o.effect == TAKE and first_return > o.end:
                return p, "the shopper held a unit and no return of theirs could come before its end"
            if not held and o.effect in (DUPLICATE, RETURN) and first_take > o.end:
                return p, "the shopper held no unit and no purchase of theirs could win one before its end"
        return None

    def _pending_by(self, end: float, cands: list[int], min_end: float, effect: str) -> int:
        """Pending operations of ``effect`` that start by ``end`` (>= min_end): the minimal
        ones, those starting after min_end (none of them placed yet) and the optional ones."""
        before = self.takes_before if effect == TAKE else self.returns_before
        later = before[bisect.bisect_right(self.starts, end)] - before[bisect.bisect_right(self.starts, min_end)]
        minimal = sum(1 for p in cands if self.ops[p].effect == effect)
        optional = sum(
            1 for j, o in enumerate(self.opt) if o.effect == effect and not self.optlin[j] and o.start <= end
        )
        return minimal + later + optional

    def _count_dead(self, cands: list[int], min_end: float) -> tuple[int, str] | None:
        for p in cands:
            o = self.ops[p]
            if o.effect == SOLD_OUT and self.count > 0:
                could_win = self._pending_by(o.end, cands, min_end, TAKE)
                if could_win < self.count:
                    return p, (
                        f"{self.count} unit(s) were left and at most {could_win} pending purchase(s) "
                        f"could win before its end: never fewer than {self.count - could_win}"
                    )
            elif o.effect == TAKE and self.count == 0:
                if self._pending_by(o.end, cands, min_end, RETURN) == 0:
                    return p, "no unit was left and no pending return could come before its end"
        return None

    def _enter(self, changed: int | None) -> str:
        """At a new node: place every satisfied minimal refusal, look the node up, look ahead.
        ``changed``: the shopper whose state the step here changed (None: the root)."""
        base = self._state()
        forced: list[int] = []
        while True:
            cands, min_end = self._window()
            if not cands:
                return _SUCCESS
            sat = [p for p in cands if self.refusal[p] and self._holds(self.ops[p])]
            if not sat:
                break
            for p in sat:
                self._linearise(p)
            forced += sat
        key = (self.lo, self.bits >> self.lo, self.optbits, self.count, self.holders)
        dead = None
        if key not in self.seen:
            self.seen.add(key)
            shoppers = self.of_shopper.keys() if changed is None else (changed,)
            for who in shoppers:
                dead = self._shopper_dead(who)
                if dead is not None:
                    break
            if dead is None:
                dead = self._count_dead(cands, min_end)
            if self.done > self.best.done:
                if dead is not None:
                    self.best = _Best(self.done, dead[0], dead[1], list(self.path[-6:]))
                else:
                    blocker = min(cands, key=lambda p: self.ops[p].end)
                    self.best = _Best(self.done, blocker, "", list(self.path[-6:]))
            if dead is None:
                changing = [p for p in cands if not self.refusal[p]]
                changing.sort(key=lambda p: (self.ops[p].effect != TAKE, self.ops[p].end))
                optional = [("opt", j) for j, o in enumerate(self.opt) if not self.optlin[j] and o.start <= min_end]
                self.frames.append(_Frame(base, self._state(), forced, changing + optional))
                return _NEW
        for p in reversed(forced):  # seen before, or sealed: a dead end
            self._unlinearise(p)
        self._restore(base)
        return _FAILED

    def _try(self, c) -> bool:
        if isinstance(c, tuple):
            o = self.opt[c[1]]
            if not self._can(o):
                return False
            self.optlin[c[1]] = 1
            self.optbits |= 1 << c[1]
            self.path.append(c)
            self._apply(o)
            return True
        o = self.ops[c]
        if not self._can(o):
            return False
        self._apply(o)
        self._linearise(c)
        return True

    def _untry(self, c, state: tuple) -> None:
        if isinstance(c, tuple):
            self.optlin[c[1]] = 0
            self.path.pop()
        else:
            self._unlinearise(c)
        self._restore(state)

    def _who(self, c) -> int:
        return self.opt[c[1]].who if isinstance(c, tuple) else self.ops[c].who

    def run(self) -> bool | None:
        self.frames: list[_Frame] = []
        outcome = self._enter(None)
        if outcome != _NEW:
            return outcome == _SUCCESS
        while self.frames:
            frame = self.frames[-1]
            if frame.applied is not None:  # back from a child that failed
                self._untry(frame.applied, frame.state)
                frame.applied = None
            descended = False
            while frame.i < len(frame.branch):
                c = frame.branch[frame.i]
                frame.i += 1
                self.steps += 1
                if self.steps > self.budget:
                    return None
                if not self._try(c):
                    continue
                frame.applied = c
                outcome = self._enter(self._who(c))
                if outcome == _SUCCESS:
                    return True
                if outcome == _NEW:
                    descended = True
                    break
                self._untry(c, frame.state)
                frame.applied = None
            if descended:
                continue
            # Every way on from this node failed, and so did the node before its eager refusals.
            self.frames.pop()
            for p in reversed(frame.forced):
                self._unlinearise(p)
            self._restore(frame.base)
        return False

    def explain(self, t0: float) -> tuple[str, Op | None]:
        best = self.best
        if best.op < 0:
            return "no operation could be placed at all", None
        p = best.op
        o = self.ops[p]
        allowed = (
            f"while it could be placed the model had at least {self.low[p]} unit(s) left "
            f"(between {self.low[p]} and {self.high[p]})"
            if self.low[p] != math.inf
            else "it never became placeable"
        )
        if o.effect in (DUPLICATE, TAKE, RETURN) and self.low[p] != math.inf:
            held = {(1, 0): "always held a unit", (0, 1): "never held a unit", (1, 1): "sometimes held a unit"}
            allowed += f" and the shopper {held.get((self.seen_holding[p], self.seen_free[p]), '?')}"
        if best.dead:
            allowed = f"{best.dead} ({allowed})"
        need = {
            TAKE: "a unit left and the shopper holding none",
            RETURN: "the shopper holding a unit",
            SOLD_OUT: "no unit left",
            DUPLICATE: "the shopper holding a unit",
        }[o.effect]
        before = "; ".join(
            (self.opt[c[1]] if isinstance(c, tuple) else self.ops[c]).op.describe(t0) for c in best.recent
        )
        return (
            f"{o.op.describe(t0)} could not be placed in its window [{_t(o.start, t0)}, {_t(o.end, t0)}] "
            f"(it needs {need}): {allowed}. The longest legal prefix placed {best.done} of {self.n} operations, "
            f"ending with: {before or 'nothing'}",
            o.op,
        )


# --- the checks ----------------------------------------------------------------------------------


def check_linearizable(
    history: Sequence[Op],
    *,
    units: int,
    memory_bound: float = 0.0,
    start: float | None = None,
    end: float | None = None,
    budget: int = 2_000_000,
    shortcuts: bool = True,
) -> Verdict:
    """Is ``history`` (one sale of ``units`` units) linearizable? ``start``/``end``: the
    sale's window on the history's clock, for ``not_started`` / ``ended``. ``budget``:
    search steps before giving up (``ok is None``). ``shortcuts=False`` skips the certain
    violations and the per-shopper projections: the search alone decides (the checker's own
    tests compare the two)."""
    ops, _, timed = _model_ops(history, memory_bound)
    t0 = min((op.send for op in history), default=0.0)
    found = _time_violations(timed, start, end, t0)
    if found is None and shortcuts:
        certain = _certain_violations(ops, units, t0)
        found = certain[0][1:] if certain else None
    if found is not None:
        return Verdict(False, found[0], found[1], 0, "certain")
    steps = 0
    if shortcuts:
        verdict = _shopper_projections(ops, budget, t0)
        if verdict.ok is not True:
            return verdict
        steps = verdict.steps
    search = _Search(ops, units, budget)
    outcome = search.run()
    steps += search.steps
    if outcome is True:
        return Verdict(True, f"{search.n} operations placed", None, steps, "search")
    if outcome is None:
        return Verdict(
            None,
            f"step budget of {budget} spent; longest legal prefix {search.best.done} of {search.n}",
            None,
            steps,
            "search",
        )
    explanation, op = search.explain(t0)
    return Verdict(False, explanation, op, steps, "search")


def certain_violations(history: Sequence[Op], *, units: int, memory_bound: float = 0.0) -> list[tuple[str, str, Op]]:
    """Every certain violation (part 1), not only the first: (kind, explanation, operation)
    with kind one of oversell, sold_out, duplicate, two_units, unheld_return. For reports."""
    ops, _, _ = _model_ops(history, memory_bound)
    return _certain_violations(ops, units, min((op.send for op in history), default=0.0))


def _shopper_projections(ops: list[_M], budget: int, t0: float) -> Verdict:
    """Each shopper's own operations (their sold_out answers aside) against the model with
    unlimited units: a necessary condition (drop every other shopper from a linearization
    of the whole and what remains is one of the projection), decided by small searches. A
    shopper's history that cannot stand alone (two wins with no return between, a
    ``duplicate`` while holding nothing) is found here in a few steps, where the whole
    search would first try every order of everyone else's operations around it."""
    own: dict[int, list[_M]] = defaultdict(list)
    for o in ops:
        if o.effect != SOLD_OUT:
            own[o.who].append(o)
    steps = 0
    for shopper_ops in own.values():
        search = _Search(shopper_ops, len(shopper_ops) + 1, budget)
        outcome = search.run()
        steps += search.steps
        if outcome is not True:
            if outcome is None:
                return Verdict(None, "step budget spent on one shopper's operations", None, steps, "shopper")
            explanation, op = search.explain(t0)
            return Verdict(
                False, f"shopper {shopper_ops[0].op.shopper}'s own operations: {explanation}", op, steps, "shopper"
            )
    return Verdict(True, "", None, steps, "shopper")


@dataclass(frozen=True)
class SoldOutBroken:
    """A ``sold_out`` answer and the units sold after it beyond those that came back."""

    sold_out: Op
    sold_after: list[Op]  # the wins beyond the returns, in the order they were answered
    t0: float = 0.0  # the history's first send, times are shown from it

    def __str__(self) -> str:
        wins = "; ".join(o.describe(self.t0) for o in self.sold_after[:5])
        return f"{len(self.sold_after)} unit(s) sold after {self.sold_out.describe(self.t0)}: {wins}"


def sold_out_final_violations(history: Sequence[Op], memory_bound: float) -> list[Op]:
    """API.md: ``sold_out`` is final — no unit is sold to a request that begins after the
    answer unless a unit came back (a cancel or an expiry) after it. For each ``sold_out``
    answer S, the wins of requests sent after S was received are matched, in time order,
    with returns that may have happened after S's moment (window ending after S's widened
    start, ``send - memory_bound``) and before the win answered (window starting before
    the win's receive). Returns the unmatched wins of the worst S: its length is the
    number of units sold against a final ``sold_out``."""
    worst = sold_out_final_report(history, memory_bound)
    return worst.sold_after if worst else []


def sold_out_final_report(history: Sequence[Op], memory_bound: float) -> SoldOutBroken | None:
    sold_outs, wins, returns = [], [], []
    for op in history:
        effect, certain = effect_of(op)
        if effect == SOLD_OUT:
            sold_outs.append(op)
        elif effect == TAKE and certain:
            wins.append(op)
        elif effect == RETURN:
            returns.append(op)
    wins.sort(key=lambda o: o.receive)
    t0 = min((op.send for op in history), default=0.0)
    worst: SoldOutBroken | None = None
    for s in sold_outs:
        moment = s.send - memory_bound
        later = [w for w in wins if w.send > s.receive]
        if not later:
            continue
        back = sorted(r.send for r in returns if r.receive > moment)
        spare, taken, unmatched = 0, 0, []
        for w in later:  # by receive: each win uses a return that could precede it
            while taken < len(back) and back[taken] < w.receive:
                spare += 1
                taken += 1
            if spare:
                spare -= 1
            else:
                unmatched.append(w)
        if unmatched and (worst is None or len(unmatched) > len(worst.sold_after)):
            worst = SoldOutBroken(s, unmatched, t0)
    return worst
