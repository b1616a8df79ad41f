"""Gate 1 of the purchase path: checks in the web process, before the stock script runs.

Each check raises ApiError; purchase_admit runs them in the order API.md gives:
body → time window → token → (this process's sold-out memory) → rate limits (429)
→ blacklist, eligibility, captcha (403). Cheap checks first: the sold-out memory costs
nothing, the rate limits one call of lua/shopper_gate.lua (which also looks up the API
token of a shopper this process has not met), eligibility a cached read.
"""

import functools
import hmac
import ipaddress
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.utils import timezone

from core.errors import ApiError
from seckill.models import Activity
from seckill.purchase.authentication import token_known, token_lookup, token_shopper, token_shopper_of_reply
from seckill.purchase.captcha import captcha_consume
from seckill.purchase.limited import limited_for, limited_remember
from seckill.purchase.shoppers import blacklist, blacklist_remembered, shopper_facts
from seckill.purchase.took_part import took_part_known, took_part_refusal
from seckill.room.tickets import room_ticket_check
from seckill.sale.activities import activity_token_ensure
from seckill.sale.snapshot import ActivitySnapshot, activity_absent, activity_snapshot, activity_snapshot_remembered
from seckill.sale.soldout import sold_out_known
from stock.breaker import redis_away, redis_breaker
from stock.redis_client import cache_redis, stock_redis
from stock.scripts import GATE_OVER_ADDRESS, GATE_OVER_USER, GateReply, RateLimit, run_admission, run_shopper_gate

logger = logging.getLogger(__name__)

MAX_TOKEN_LENGTH = 128
MAX_CAPTCHA_FIELD_LENGTH = 64
ALLOWED_FIELDS = frozenset({"token", "quantity", "captcha_id", "captcha_answer", "ticket"})


@dataclass(frozen=True)
class PurchaseBody:
    token: str
    quantity: int
    captcha_id: str | None = None
    captcha_answer: str | None = None


def _optional_text(data: dict, field: str, *, number_ok: bool = False) -> str | None:
    value = data.get(field)
    if value is None:
        return None
    if number_ok and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # an arithmetic answer may come as a number
    # A lone surrogate ("\ud800" is valid JSON) is no text: no Redis key can be made of it.
    if not isinstance(value, str) or len(value) > MAX_CAPTCHA_FIELD_LENGTH or not _is_text(value):
        raise ApiError(
            400, "invalid_request", f"{field} must be a string of at most {MAX_CAPTCHA_FIELD_LENGTH} characters."
        )
    return value.strip() or None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def purchase_body_parse(data, *, activity: ActivitySnapshot) -> PurchaseBody:
    """Validate the purchase body: {token, quantity=1, captcha_id?, captcha_answer?}."""
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "The body must be a JSON object.")
    unknown = set(data) - ALLOWED_FIELDS
    if unknown:
        raise ApiError(400, "invalid_request", f"Unknown field(s): {', '.join(sorted(map(str, unknown)))}.")
    token = data.get("token")
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_LENGTH:
        raise ApiError(400, "invalid_request", "token is required and must be a non-empty string.")
    quantity = data.get("quantity", 1)
    # bool is an int in Python; true is not a quantity.
    if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= activity.per_user_limit:
        raise ApiError(
            400,
            "invalid_request",
            f"quantity must be an integer from 1 to {activity.per_user_limit}.",
        )
    return PurchaseBody(
        token, quantity, _optional_text(data, "captcha_id"), _optional_text(data, "captcha_answer", number_ok=True)
    )


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


# --- rate limits --------------------------------------------------------------------


def client_ip(request) -> str | None:
    """The client's address: the socket's, or the trusted proxy header's when one is set.

    With SECKILL_TRUSTED_PROXY_HEADER (e.g. X-Forwarded-For) the address is the one
    SECKILL_TRUSTED_PROXY_COUNT hops from the right: the entry our own proxy wrote, which
    a client cannot forge (entries further left are whatever the client sent).
    """
    header = settings.SECKILL_TRUSTED_PROXY_HEADER
    if header:
        value = request.META.get("HTTP_" + header.upper().replace("-", "_"), "")
        hops = [hop.strip() for hop in value.split(",") if hop.strip()]
        count = max(1, settings.SECKILL_TRUSTED_PROXY_COUNT)
        if len(hops) >= count:
            ip = _valid_ip(hops[-count])
            if ip:
                return ip
    return _valid_ip(request.META.get("REMOTE_ADDR", ""))


def _valid_ip(value: str) -> str | None:
    # Three calls a purchase with the same few addresses: parsed once each (an address
    # is at most 45 characters; anything longer is not one and is not remembered).
    return _ip_parsed(value) if len(value) <= 45 else None


@functools.lru_cache(maxsize=4096)
def _ip_parsed(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _ip_bucket(ip: str) -> str:
    """IPv6 clients get a /64 each, as ISPs hand them out; one bucket per IPv4 address."""
    address = ipaddress.ip_address(ip)
    if address.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return ip


_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def rate_parse(rate: str) -> tuple[int, int] | None:
    """A rate such as "10/s", "600/m" or "100/5m" as (requests, window seconds); None for
    "off" or empty. The form ``seckill.models.validate_rate`` accepts."""
    if not rate or rate == "off":
        return None
    count, _, period = rate.partition("/")
    return int(count), int(period[:-1] or 1) * _PERIOD_SECONDS[period[-1]]


def _rate_limited(retry_after: float, detail: str = "Too many requests; please slow down.") -> ApiError:
    return ApiError(429, "rate_limited", detail, retry_after=max(1, math.ceil(retry_after)))


@dataclass(frozen=True)
class TrafficLimits:
    """The per-user and per-address limits of one scope (``purchase:<id>``, ``captcha:<id>``):
    fixed windows counted in the cache Redis by ``lua/shopper_gate.lua``."""

    scope: str
    per_user: RateLimit | None
    per_address: RateLimit | None

    @property
    def any(self) -> bool:
        return self.per_user is not None or self.per_address is not None

    def user_memory(self, user_id: int) -> str:
        return f"{self.scope}:user:{user_id}"


def activity_limits(request, activity: ActivitySnapshot, *, endpoint: str) -> TrafficLimits:
    """The limits of one endpoint of an activity ("purchase", "captcha": counted apart):
    the activity's own rates, else the settings; "off" disables."""
    user_rate = rate_parse(activity.rate_per_user or settings.SECKILL_RATE_PER_USER)
    ip_rate = rate_parse(activity.rate_per_ip or settings.SECKILL_RATE_PER_IP)
    ip = client_ip(request) if ip_rate else None
    scope = f"{endpoint}:{activity.id}"
    return TrafficLimits(
        scope,
        RateLimit(f"seckill:rl:{scope}:user", *user_rate) if user_rate else None,
        RateLimit(f"seckill:rl:{scope}:ip:{_ip_bucket(ip)}", *ip_rate) if ip_rate and ip else None,
    )


def _limits_remembered(limits: TrafficLimits, user_id: int) -> None:
    """Over a limit until its window ends, as this process remembers: 429 without Redis."""
    for memory_key in (limits.user_memory(user_id), limits.per_address and limits.per_address.name):
        left = limited_for(memory_key) if memory_key else None
        if left is not None:
            raise _rate_limited(left)


def _limits_verdict(limits: TrafficLimits, reply: GateReply, user_id: int) -> None:
    """The gate script's answer: 429 (remembered until the window ends) or on."""
    if reply.over == GATE_OVER_USER:
        memory_key = limits.user_memory(user_id)
    elif reply.over == GATE_OVER_ADDRESS and limits.per_address is not None:  # counted only when it has a limit
        memory_key = limits.per_address.name
    else:
        return
    limited_remember(memory_key, reply.ms_left / 1000)
    raise _rate_limited(reply.ms_left / 1000)


def auth_failure_limit(request) -> RateLimit | None:
    """The failed token authentications of the client's address (SECKILL_AUTH_FAILURES_PER_IP),
    counted by the gate script; None when off or the address is unknown."""
    rate = rate_parse(settings.SECKILL_AUTH_FAILURES_PER_IP)
    ip = client_ip(request) if rate else None
    return RateLimit(f"auth:failed:{_ip_bucket(ip)}", *rate) if rate and ip else None


def _gate_call(
    limits: TrafficLimits,
    *,
    token: str | None,
    user_id: int | None,
    count: bool,
    failures: RateLimit | None = None,
) -> GateReply | None:
    """One call to the cache Redis: the token's lookup (``token``, its failure counted
    against ``failures``) and/or the count against the limits (``count``). None when Redis
    is away: the request goes on (the database fallback that serves purchases meanwhile
    has a strict concurrency cap)."""
    if redis_away():
        return None
    try:
        return run_shopper_gate(
            cache_redis(),
            lookup=token_lookup(token, failures) if token else None,
            user_id=user_id,
            count=count,
            per_user=limits.per_user,
            per_address=limits.per_address,
        )
    except redis.RedisError as exc:
        redis_breaker().error_note()
        logger.warning("rate limits of %s not checked: %s", limits.scope, exc)
        return None


def traffic_limits_check(limits: TrafficLimits, *, user_id: int) -> None:
    """Per-user then per-address limits of a shopper whose id is known."""
    if not limits.any:
        return
    _limits_remembered(limits, user_id)
    reply = _gate_call(limits, token=None, user_id=user_id, count=True)
    if reply is not None:
        _limits_verdict(limits, reply, user_id)


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
    reply = _gate_call(limits, token=token, user_id=None, count=count, failures=failures)
    shopper, counted = token_shopper_of_reply(token, reply, failures=failures)
    if before_count is not None:
        before_count(shopper.user_id)
    if not counted:
        # The database answered (or Redis is away): the limits on their own.
        if count and reply is not None:
            traffic_limits_check(limits, user_id=shopper.user_id)
        return shopper.user_id
    assert reply is not None
    _limits_verdict(limits, reply, shopper.user_id)
    return shopper.user_id


def _admission_rate(activity: ActivitySnapshot) -> int:
    return activity.admission_rate if activity.admission_rate is not None else settings.SECKILL_ADMISSION_RATE


_SALE_BUSY = "The sale is very busy; please try again."


def purchase_admission_remembered(activity: ActivitySnapshot) -> None:
    """The cap's verdict while this process remembers the bucket empty: 429 until its next
    token is due, without Redis."""
    if not _admission_rate(activity):
        return
    left = limited_for(f"admission:{activity.id}")
    if left is not None:
        raise _rate_limited(left, _SALE_BUSY)  # no token due before then


def purchase_admission_check(activity: ActivitySnapshot) -> None:
    """The activity's global cap: a token bucket in Redis shared by every web process."""
    rate = _admission_rate(activity)
    if not rate:
        return
    purchase_admission_remembered(activity)
    burst = activity.admission_burst or settings.SECKILL_ADMISSION_BURST or rate
    if redis_away():
        return
    try:
        admitted, wait_ms = run_admission(stock_redis(), activity.keys, rate=rate, burst=burst)
    except redis.RedisError as exc:
        logger.warning("admission cap of activity %s not checked: %s", activity.id, exc)
        return  # the stock script meets the same Redis and answers busy
    if not admitted:
        limited_remember(f"admission:{activity.id}", wait_ms / 1000)
        raise _rate_limited(wait_ms / 1000, _SALE_BUSY)


def purchase_rate_check(request, *, activity: ActivitySnapshot, user_id: int) -> None:
    traffic_limits_check(activity_limits(request, activity, endpoint="purchase"), user_id=user_id)
    purchase_admission_check(activity)


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
