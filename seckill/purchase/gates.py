"""Gate 1 of the purchase path: checks in the web process, before the stock script runs.

Each check raises ApiError; purchase_admit runs them in the order API.md gives:
body → time window → token → (this process's sold-out memory) → rate limits (429)
→ blacklist, eligibility, captcha (403). Cheap checks first: the sold-out memory costs
nothing, the rate limits one call of lua/shopper_gate.lua (which also looks up the API
token of a shopper this process has not met), eligibility a cached read.
"""

import functools
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from core.errors import ApiError
from seckill.models import Activity
from seckill.purchase.authentication import token_known, token_shopper, token_shopper_of_reply
from seckill.purchase.body import PurchaseBody, purchase_body_parse
from seckill.purchase.captcha import captcha_consume
from seckill.purchase.limits import activity_limits, auth_failure_limit, client_ip, purchase_admission_check
from seckill.purchase.shoppers import blacklist, blacklist_remembered, shopper_facts
from seckill.purchase.token_cache import token_lookup
from seckill.purchase.took_part import took_part_known, took_part_refusal
from seckill.room.tickets import room_ticket_check
from seckill.sale.activities import activity_token_ensure
from seckill.sale.snapshot import ActivitySnapshot, activity_absent, activity_snapshot, activity_snapshot_remembered
from seckill.sale.soldout import sold_out_known
from seckill.traffic import TrafficLimits, gate_call, limits_verdict, traffic_limits_check
from stock.breaker import redis_breaker
from stock.scripts import RateLimit

logger = logging.getLogger(__name__)


def purchase_window_check(activity: ActivitySnapshot, now: datetime) -> None:
    phase = activity.phase_at(now)
    if phase == Activity.Phase.UPCOMING:
        raise ApiError(403, "not_started", "The sale has not started yet.")
    if phase == Activity.Phase.ENDED:
        raise ApiError(403, "ended", "The sale has ended.")


def purchase_token_check(activity: ActivitySnapshot, token: str, now: datetime) -> None:
    """The token exists from the start; the first caller after the start creates it if
    the start task has not yet."""
    expected = activity.purchase_token or activity_token_ensure(activity_id=activity.id, now=now)
    # surrogatepass: JSON admits lone surrogates ("\ud800"), which strict UTF-8 cannot encode.
    if not expected or not hmac.compare_digest(expected.encode(), token.encode("utf-8", "surrogatepass")):
        raise ApiError(403, "bad_token", "The purchase token is not valid for this sale.")


def purchase_sold_out_check(activity: ActivitySnapshot) -> None:
    """Redis said "nothing left" less than SECKILL_SOLD_OUT_TTL ago: answer as it would."""
    if sold_out_known(activity.id):
        raise ApiError(410, "sold_out", "Sold out.")


def purchase_took_part_check(activity: ActivitySnapshot, user_id: int) -> None:
    """Redis said this shopper took part less than SECKILL_DUPLICATE_TTL ago: answer as it
    would, before the count against the limits."""
    if took_part_known(activity.id, user_id):
        raise took_part_refusal()


# Called with the shopper's user id before the count against the limits.
BeforeCount = Callable[[int], None]


# --- the answers that are the same for every caller ---------------------------------


def purchase_refusal_for_everyone(activity: ActivitySnapshot | None, now: datetime) -> ApiError | None:
    """The refusals API.md lets the server give before authentication and before the
    body is read, because they are the same for every caller and reveal nothing
    private: no such activity (404), outside its time window (403), sold out as this
    process remembers (410). The same checks the full path runs (``purchase_admit``),
    so an early answer is the answer the full path would give."""
    if activity is None:
        return activity_absent()
    try:
        purchase_window_check(activity, now)
        purchase_sold_out_check(activity)
    except ApiError as exc:
        return exc
    return None


def purchase_early_refusal(activity_id: int, now: datetime | None = None) -> ApiError | None:
    """The refusal for everyone that this process's memory alone decides, with no I/O
    (the server's front calls it on its event loop); None when the memory does not know
    the activity (the full path looks it up) or has no refusal."""
    known, activity = activity_snapshot_remembered(activity_id)
    if not known:
        return None
    return purchase_refusal_for_everyone(activity, now or timezone.now())


def token_shopper_limited(
    limits: TrafficLimits,
    *,
    token: str,
    before_count: BeforeCount | None,
    failures: RateLimit | None = None,
) -> int:
    """The user id of an API token, and (``before_count``: called with the user id first)
    the limits counted and checked, in one round trip for a shopper this process has not
    met yet (the shared token cache, the token filter and the counters live in the same
    Redis). Raises AuthenticationFailed for an unknown token, ApiError 429 when over a
    limit or when the address (``failures``) failed to authenticate too often."""
    known = token_known(token)
    if known is not None:
        if before_count is not None:
            before_count(known.user_id)
            traffic_limits_check(limits, user_id=known.user_id)
        return known.user_id
    count = before_count is not None and limits.any
    reply = gate_call(limits, lookup=token_lookup(token, failures), user_id=None, count=count)
    shopper, counted = token_shopper_of_reply(token, reply, failures=failures)
    if before_count is not None:
        before_count(shopper.user_id)
    if not counted:
        # The database answered (or Redis is away): the limits on their own.
        if count and reply is not None:
            traffic_limits_check(limits, user_id=shopper.user_id)
        return shopper.user_id
    assert reply is not None
    limits_verdict(limits, reply, shopper.user_id)
    return shopper.user_id


# --- who may buy ------------------------------------------------------------------


def device_id(request) -> str | None:
    value = request.META.get("HTTP_" + settings.SECKILL_DEVICE_HEADER.upper().replace("-", "_"))
    return value.strip()[:128] if value else None


def purchase_blacklist_check(request, *, user_id: int) -> None:
    listed = blacklist()
    device = device_id(request)
    if user_id in listed.users or (device and device in listed.devices) or listed.has_ip(client_ip(request)):
        raise ApiError(403, "blacklisted", "You may not take part in this sale.")


def purchase_eligibility_check(activity: ActivitySnapshot, *, user_id: int, now: datetime) -> None:
    min_level, min_days = activity.min_member_level or 0, activity.min_account_age_days or 0
    if not min_level and not min_days:
        return
    facts = shopper_facts(user_id)
    if facts is None or facts.member_level < min_level:
        raise ApiError(403, "not_eligible", f"This sale is for members of level {min_level} and up.")
    if now - facts.date_joined < timedelta(days=min_days):
        raise ApiError(403, "not_eligible", f"This sale is for accounts at least {min_days} days old.")


def purchase_captcha_check(activity: ActivitySnapshot, *, user_id: int, body: PurchaseBody) -> None:
    if not activity.captcha_required:
        return
    if not body.captcha_id or body.captcha_answer is None:
        raise ApiError(403, "captcha_required", "Answer a captcha first (POST the captcha endpoint of this activity).")
    if not captcha_consume(
        activity_id=activity.id, user_id=user_id, challenge_id=body.captcha_id, answer=body.captcha_answer
    ):
        raise ApiError(403, "captcha_invalid", "The captcha answer is wrong, expired or already used.")


# --- the purchase's checks, in order ------------------------------------------------------


def purchase_local_check(activity: ActivitySnapshot, *, body: PurchaseBody, now) -> None:
    """Time window, token, sold-out memory: what this process decides alone."""
    purchase_window_check(activity, now)
    purchase_token_check(activity, body.token, now)
    purchase_sold_out_check(activity)


def purchase_shopper_check(request, *, activity: ActivitySnapshot, user_id: int, body: PurchaseBody, now) -> None:
    """Who may buy: blacklist, eligibility, captcha (403), after the front checks."""
    purchase_blacklist_check(request, user_id=user_id)
    purchase_eligibility_check(activity, user_id=user_id, now=now)
    purchase_captcha_check(activity, user_id=user_id, body=body)


@dataclass(frozen=True)
class Admitted:
    """A purchase that passed every check: the stock script decides the rest."""

    activity: ActivitySnapshot
    user_id: int
    body: PurchaseBody
    now: datetime
    ticket_nonce: str | None = None  # a waiting room's ticket, consumed once the purchase reserves


# Authenticates the shopper (raising AuthenticationFailed or ApiError 401) and returns the
# user id; with a BeforeCount (the purchase passed its checks so far), calls it with the
# user id, then counts and checks the limits (429).
Identify = Callable[[TrafficLimits, "BeforeCount | None"], int]


def purchase_admit(request, *, activity: ActivitySnapshot, data, now: datetime, identify: Identify) -> Admitted:
    """Every check of a purchase, in API.md's order: token (401) → body (400) → window and
    token (403) → sold-out memory (410) → rate limits and the admission cap (429) → who may
    buy (403). Both ways in (the token-authenticated JSON call and the DRF view) run this.

    The checks this process decides alone run first and their answer waits for the
    shopper's: that way a new shopper's token lookup and the count against the limits are
    one round trip, and a request refused before the limits is not counted."""
    refused = body = None
    try:
        body = purchase_body_parse(data, activity=activity)
        purchase_local_check(activity, body=body, now=now)
    except ApiError as exc:
        refused = exc
    before_count = functools.partial(purchase_took_part_check, activity) if refused is None else None
    user_id = identify(activity_limits(request, activity, endpoint="purchase"), before_count)
    if refused is not None:
        raise refused
    assert body is not None
    nonce = room_ticket_check(activity, user_id=user_id, ticket=data.get("ticket"), now=now)
    purchase_admission_check(activity)
    purchase_shopper_check(request, activity=activity, user_id=user_id, body=body, now=now)
    return Admitted(activity, user_id, body, now, ticket_nonce=nonce)


def purchase_runs_inline(activity_id: int) -> bool:
    """Whether a token purchase of this activity waits on nothing but Redis and, for a
    shopper neither this process nor the shared cache knows, the loop's token look-up
    (core.loop_database), so the server may run it on its event loop (core.loop_bridge),
    which costs a fraction of the hop to a thread. Not when it may need Django's database
    connections (the activity or the blacklist not in this process's memory; eligibility
    rules, which read the shopper's facts), a Redis that erred in this process lately (its
    timeout would hold every connection of the loop), or a Redis Cluster (its client has no
    asyncio twin here)."""
    if settings.SECKILL_REDIS_CLUSTER or not redis_breaker().quiet:
        return False
    _known, activity = activity_snapshot_remembered(activity_id)
    if activity is None or not activity.purchase_token:
        return False
    if activity.min_member_level or activity.min_account_age_days:
        return False
    return blacklist_remembered()


def known_shopper(user_id: int) -> Identify:
    """For a request already authenticated (the DRF view): only the limits to count."""

    def identify(limits: TrafficLimits, before_count: BeforeCount | None) -> int:
        if before_count is not None:
            before_count(user_id)
            traffic_limits_check(limits, user_id=user_id)
        return user_id

    return identify


def token_purchase_admit(request, *, activity_id: int) -> Admitted:
    """The checks for an API client (token auth, JSON body) without DRF's request
    machinery, which costs more than the checks themselves: a flash crowd is nearly all
    such requests, and most are answered "sold out" or "rate limited", which should cost
    what the bare JSON view costs. Raises ApiError to answer, AuthenticationFailed (401)
    for a token nobody has."""
    auth = request.META.get("HTTP_AUTHORIZATION", "").split()
    if len(auth) != 2 or auth[0].lower() != "token":
        raise ApiError(401, "not_authenticated", "Authentication credentials were not provided.", auth_scheme="Token")
    try:
        data = json.loads(request.body)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_request", "The body is not valid JSON.") from None
    activity = activity_snapshot(activity_id)
    if activity is None:
        raise activity_absent()
    now = timezone.now()
    failures = auth_failure_limit(request)
    if not activity.purchase_token and activity.phase_at(now) == Activity.Phase.LIVE:
        # Started, and the start task has not made the token yet: the first caller makes
        # it (purchase_token_check), after authentication, not before.
        token_shopper(auth[1], failures=failures)

    def identify(limits: TrafficLimits, before_count: BeforeCount | None) -> int:
        return token_shopper_limited(limits, token=auth[1], before_count=before_count, failures=failures)

    return purchase_admit(request, activity=activity, data=data, now=now, identify=identify)
