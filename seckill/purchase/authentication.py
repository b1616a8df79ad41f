"""DRF authentication without a database query per request (the shared cache it reads:
seckill.purchase.token_cache).

A flash sale sends the same few thousand shoppers many times a second; DRF's stock
TokenAuthentication adds a query (token join user) to every purchase, and its
SessionAuthentication loads the user row behind every browser request. Both are
remembered in the process for SECKILL_TOKEN_CACHE_TTL seconds (default 30), so a
deleted token, a deactivated user or a session invalidated by a password change stops
working within that time.

A token a process has not seen yet (in a flash crowd: nearly every purchase, one per
shopper) is looked up in the cache Redis before PostgreSQL: one call of
stock/lua/shopper_gate.lua instead of a query, shared by every web process. Tokens enter
it when created (signal), on a database lookup, and in bulk before a sale
(``manage.py token_cache_fill``); deleting a token or saving its user inactive removes it
at once. A change that bypasses model signals (``QuerySet.update``) is seen after
SECKILL_TOKEN_SHARED_TTL (default 6 h). Each entry carries an HMAC (a key derived from
SECRET_KEY) over the token's digest and the user: an entry written by anyone else names
nobody, and the database decides, one prepared statement per token on the thread's
connection.

A made-up token costs no query: the token filter (a Bloom filter of every token's digest,
sized by ``token_cache_fill``, kept by the signals) refuses nearly all of them in the same
call, a token the database refused is remembered for SECKILL_TOKEN_REFUSED_TTL in Redis and
in the process, and an address past SECKILL_AUTH_FAILURES_PER_IP failed authentications is
answered 429 without the database. A real token is never refused by the filter: every
token is added before its creation returns, and a filter that is missing lets every token
through to the lookup.
"""

import logging
import math
from typing import NoReturn

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from drf_spectacular.authentication import SessionScheme
from redis import RedisError
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed

from core.errors import ApiError
from core.loop_bridge import await_only, on_loop
from core.loop_database import loop_database
from core.memory import ProcessMemory
from inventory.services import prepared_cursor
from seckill.purchase.limits import auth_failure_limit
from seckill.purchase.token_cache import shopper_of_entry, token_lookup, token_shared_remember
from stock.breaker import redis_away
from stock.redis_client import cache_redis
from stock.scripts import (
    GATE_OVER_FAILURES,
    GATE_UNKNOWN_TOKEN,
    GateReply,
    RateLimit,
    run_shopper_gate,
)

logger = logging.getLogger(__name__)

# ("token", key) -> (user id, username) or REFUSED, ("session", user id, auth hash) -> User.
_memory: ProcessMemory[tuple, object] = ProcessMemory("seckill.purchase.authentication", max_entries=100_000)
_cached = _memory.get
REFUSED = "refused"  # a token the database refused moments ago


def _remember(key, user) -> None:
    _memory.put(key, user, settings.SECKILL_TOKEN_CACHE_TTL)


def _token_user_sql(*, many: bool = False) -> str:
    User = get_user_model()
    return (
        f"SELECT {'t.key, ' if many else ''}u.{User._meta.pk.column}, u.{User.USERNAME_FIELD}"
        f" FROM {Token._meta.db_table} t JOIN {User._meta.db_table} u ON u.{User._meta.pk.column} = t.user_id"
        f" WHERE t.key = {'ANY(%s)' if many else '%s'} AND u.is_active"
    )


class TokenShopper:
    """Whom a token belongs to. The User instance is built only when DRF asks for one:
    the purchase's front gates need the id alone, and a flood is mostly new shoppers."""

    __slots__ = ("_user", "user_id", "username")

    def __init__(self, user_id: int, username: str):
        self.user_id, self.username = user_id, username
        self._user: AbstractBaseUser | None = None

    @property
    def user(self):
        if self._user is None:
            User = get_user_model()
            user = User(pk=self.user_id, is_active=True, **{User.USERNAME_FIELD: self.username})
            user._state.adding = False
            self._user = user
        return self._user


def _remember_token(key: str, shopper: TokenShopper) -> None:
    # A tuple of an int and a str, not the TokenShopper: the cyclic garbage collector does
    # not track it, so a full collection does not walk every shopper of a flood (at 60,000
    # remembered shoppers its pauses were 20-50 ms, the purchases' p99: docs/BENCHMARKS.md).
    _remember(("token", key), (shopper.user_id, shopper.username))


def token_known(key: str) -> TokenShopper | None:
    """The shopper of a token this process remembers, without any I/O; AuthenticationFailed
    for a token it remembers refused."""
    known = _cached(("token", key))
    if known == REFUSED:
        raise AuthenticationFailed("Invalid token.")
    return TokenShopper(*known) if isinstance(known, tuple) else None  # (user id, username), or None


def _refuse(key: str) -> NoReturn:
    _memory.put(("token", key), REFUSED, min(settings.SECKILL_TOKEN_REFUSED_TTL, settings.SECKILL_TOKEN_CACHE_TTL))
    raise AuthenticationFailed("Invalid token.")


def _too_many_failures(ms_left: int) -> ApiError:
    return ApiError(
        429,
        "rate_limited",
        "Too many failed authentications from your address; please wait.",
        retry_after=max(1, math.ceil(ms_left / 1000)),
    )


def _gate_lookup(key: str, failures: RateLimit | None, *, refused: bool = False) -> GateReply | None:
    """The token looked up in the cache Redis (or, ``refused``, its refusal recorded);
    None when Redis is away."""
    if redis_away():
        return None
    try:
        return run_shopper_gate(
            cache_redis(),
            lookup=token_lookup(key, failures),
            user_id=None,
            count=False,
            per_user=None,
            per_address=None,
            refused=refused,
        )
    except RedisError as exc:
        logger.warning("shared token cache not read: %s", exc)
        return None


def token_shopper_of_reply(
    key: str, reply: GateReply | None, *, failures: RateLimit | None
) -> tuple[TokenShopper, bool]:
    """The shopper of a token the gate script looked up (``reply``; None: Redis away), and
    whether the reply is the token's own entry (its counts apply). The database answers
    when the cache may hold the token but does not (or holds an entry nobody signed).
    Raises AuthenticationFailed (401) or ApiError 429 (the address failed too often)."""
    if reply is not None:
        if reply.over == GATE_UNKNOWN_TOKEN:
            _refuse(key)
        if reply.over == GATE_OVER_FAILURES:
            raise _too_many_failures(reply.ms_left)
        if reply.shopper is not None:
            named = shopper_of_entry(key, reply.shopper)
            if named is not None:
                known = TokenShopper(*named)
                _remember_token(key, known)
                return known, True
    return _token_shopper_from_database(key, failures=failures, redis_up=reply is not None), False


def _token_shopper_from_database(key: str, *, failures: RateLimit | None, redis_up: bool) -> TokenShopper:
    """The token looked up on this thread's connection (under the web tier's statement
    timeout: server.app). A key no token can have is not looked up."""
    row = _token_row(key) if _may_be_a_token(key) else None
    if row is None:
        reply = _gate_lookup(key, failures, refused=True) if redis_up else None
        if reply is not None and reply.over == GATE_OVER_FAILURES:
            raise _too_many_failures(reply.ms_left)
        _refuse(key)
    known = TokenShopper(*row)
    _remember_token(key, known)
    return known


_TOKEN_KEY_LENGTH = Token._meta.get_field("key").max_length or 40


def _may_be_a_token(key: str) -> bool:
    # PostgreSQL refuses a NUL in text; no token is longer than the column.
    return len(key) <= _TOKEN_KEY_LENGTH and "\x00" not in key


def _token_row(key: str) -> tuple[int, str] | None:
    """(user id, username) of an active user's token, written to the shared cache; None."""
    # One fixed-text statement, prepared once per connection: not an ORM query, and not
    # parsed and planned again for every new shopper of a flood. On the event loop, on the
    # loop's own connection (Django's refuse the loop's thread).
    if on_loop():
        row = await_only(loop_database().fetch_keyed(_token_user_sql(many=True), key))
    else:
        with prepared_cursor() as cursor:
            cursor.execute(_token_user_sql(), [key])
            row = cursor.fetchone()
    if row is not None:
        try:
            token_shared_remember([(key, *row)])
        except RedisError as exc:
            logger.warning("shared token cache not written: %s", exc)
    return row


def token_shopper(key: str, *, failures: RateLimit | None = None) -> TokenShopper:
    """The shopper of an API token; raises AuthenticationFailed as DRF would, ApiError 429
    when the client's address (``failures``, its counter) failed too often."""
    known = token_known(key)
    if known is not None:
        return known
    # A miss is the first request of a shopper in this process: in a flood that is most
    # requests. The cache Redis answers most, made-up tokens included.
    return token_shopper_of_reply(key, _gate_lookup(key, failures), failures=failures)[0]


class CachedTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        self.failures = auth_failure_limit(request)  # DRF makes one authenticator per request
        return super().authenticate(request)

    def authenticate_credentials(self, key):
        return token_shopper(key, failures=getattr(self, "failures", None)).user, key


class CachedSessionAuthentication(SessionAuthentication):
    """SessionAuthentication whose user comes from this process's memory.

    Keyed by the session's user id *and* auth hash: a session whose hash no longer
    matches (password changed) is not served from the cache once it expires; a new
    session is verified by Django in full (``request.user``) before it is remembered.
    CSRF is enforced exactly as by DRF.
    """

    def authenticate(self, request):
        django_request = request._request
        session = getattr(django_request, "session", None)
        user_id = session.get(SESSION_KEY) if session is not None else None
        auth_hash = session.get(HASH_SESSION_KEY) if session is not None else None
        if user_id is None or not auth_hash:
            return None
        key = ("session", str(user_id), auth_hash)
        user = _cached(key)
        if user is None:
            user = getattr(django_request, "user", None)  # Django's full check
            if user is None or not user.is_authenticated or not user.is_active:
                return None
            _remember(key, user)
        self.enforce_csrf(request)
        return user, None


def token_cache_clear() -> None:
    """Forget this process's users (the shared cache is left: delete tokens to revoke)."""
    _memory.clear()


class CachedSessionScheme(SessionScheme):
    """Documents CachedSessionAuthentication in /api/schema/ as the session cookie it is
    (without this, drf-spectacular warns, and `check --deploy` is not clean)."""

    target_class = "seckill.purchase.authentication.CachedSessionAuthentication"
