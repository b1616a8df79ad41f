"""DRF authentication without a database query per request.

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

import functools
import hashlib
import hmac
import logging
import math
from collections.abc import Iterable
from typing import NoReturn

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django_redis import get_redis_connection
from drf_spectacular.authentication import SessionScheme
from redis import RedisError
from redis.exceptions import LockError
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed

from core.errors import ApiError
from core.loop_bridge import await_only, on_loop
from core.loop_database import loop_database
from core.memory import ProcessMemory
from inventory.services import prepared_cursor
from seckill.purchase.limits import auth_failure_limit
from stock.breaker import redis_away
from stock.redis_client import cache_redis
from stock.scripts import (
    GATE_OVER_FAILURES,
    GATE_UNKNOWN_TOKEN,
    GateReply,
    RateLimit,
    TokenFilter,
    TokenLookup,
    run_shopper_gate,
    run_token_filter_add,
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


# --- the shared cache: token digest -> "user_id:username:mac" in the cache Redis -------

SHARED_PREFIX = "auth:token:"
REFUSED_PREFIX = "auth:refused:"
TOKEN_FILTER = TokenFilter("auth:filter", "auth:filter:params")
TOKEN_FILTER_NEXT = TokenFilter("auth:filter:next", "auth:filter:next:params")  # while a fill rebuilds it
# The filter holds at least this many tokens, and twice those there are: room to grow
# before its false-positive rate rises above SECKILL_TOKEN_FILTER_ERROR_RATE.
TOKEN_FILTER_MIN_CAPACITY = 100_000
_MAX_FILTER_BITS = 2**32 - 1  # a Redis string's limit (512 MB)


def _digest(key: str) -> str:
    # A digest, not the credential: a reader of Redis cannot use what it finds there.
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()


def token_shared_key(key: str) -> str:
    return SHARED_PREFIX + _digest(key)


def _token_filter_hashes(digest: str) -> tuple[int, int]:
    # Double hashing (Kirsch-Mitzenmacher): bit i is (h1 + i * h2) % bits; h2 odd.
    return int(digest[:8], 16), int(digest[8:16], 16) | 1


def token_filter_size(capacity: int, error_rate: float) -> tuple[int, int]:
    """(bits, hashes) of a Bloom filter holding ``capacity`` items at ``error_rate``."""
    bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
    bits = min(bits, _MAX_FILTER_BITS)
    return bits, max(1, round(bits / capacity * math.log(2)))


_ENTRY_SALT = b"seckill.authentication.token-entry"


@functools.lru_cache(maxsize=4)
def _entry_mac_key(secret: str) -> bytes:
    # django.utils.crypto.salted_hmac's key, derived once per SECRET_KEY instead of per entry.
    return hashlib.sha256(_ENTRY_SALT + secret.encode()).digest()


def _entry_mac(digest: str, user_id: int, username: str) -> str:
    message = f"{digest}:{user_id}:{username}".encode()
    return hmac.new(_entry_mac_key(settings.SECRET_KEY), message, hashlib.sha256).hexdigest()[:32]


def _entry(key: str, user_id: int, username: str) -> str:
    return f"{user_id}:{username}:{_entry_mac(_digest(key), user_id, username)}"


def _shopper_of_entry(key: str, entry: str) -> TokenShopper | None:
    """The shopper an entry names, if this project wrote it for this token; else None."""
    head, _, mac = entry.rpartition(":")
    user_id, _, username = head.partition(":")
    if not user_id.isdigit() or not hmac.compare_digest(mac, _entry_mac(_digest(key), int(user_id), username)):
        logger.warning("a shared token cache entry with a wrong signature was ignored")
        return None
    return TokenShopper(int(user_id), username)


def token_lookup(key: str, failures: RateLimit | None) -> TokenLookup:
    """What the gate script needs to look ``key`` up (and count its failure against
    ``failures``, the client address's counter)."""
    digest = _digest(key)
    return TokenLookup(
        entry=SHARED_PREFIX + digest,
        refused=REFUSED_PREFIX + digest,
        filter=TOKEN_FILTER,
        hashes=_token_filter_hashes(digest),
        refused_ms=max(1, int(settings.SECKILL_TOKEN_REFUSED_TTL * 1000)),
        failures=failures,
    )


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
            known = _shopper_of_entry(key, reply.shopper)
            if known is not None:
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


def _shared_set(key: str, user_id: int, username: str, ttl: int) -> tuple:
    """The command that puts a token's entry in the shared cache."""
    return ("SET", token_shared_key(key), _entry(key, user_id, username), "EX", ttl)


def token_shared_remember(entries: Iterable[tuple[str, int, str]]) -> int:
    """Put (key, user id, username) triples in the shared cache; returns how many."""
    ttl = int(settings.SECKILL_TOKEN_SHARED_TTL)
    done = 0
    pipe = cache_redis().pipeline(transaction=False)
    for key, user_id, username in entries:
        pipe.execute_command(*_shared_set(key, user_id, username, ttl))
        done += 1
        if done % 1000 == 0:
            pipe.execute()
    pipe.execute()
    return done


def token_filter_add(keys: list[str]) -> None:
    """Tokens into the filter (and the next one while a fill builds it); what the
    refused-token cache remembers of them is forgotten."""
    if not keys:
        return
    client = get_redis_connection("default")
    digests = [_digest(key) for key in keys]
    run_token_filter_add(client, [TOKEN_FILTER, TOKEN_FILTER_NEXT], [_token_filter_hashes(d) for d in digests])
    client.delete(*[REFUSED_PREFIX + d for d in digests])


# Set by every fill, for half the entries' lifetime: while it lasts the cache is fresh and
# the automatic fill (token_shared_fill_due) leaves it; a cache Redis that restarted empty
# has lost it with the entries.
FILLED_MARK = "auth:filled"
# Held while a fill runs: two fills at once would each start the next filter afresh and one
# would put in place a filter without the other's tokens, refusing real shoppers.
FILL_LOCK = "auth:filling"
_FILL_LOCK_SECONDS = 3600  # as long as the next filter is kept (a fill that died)


class TokenFillRunning(Exception):
    """Another fill is running (the automatic one, or another operator's)."""


def _filled_mark_seconds() -> int:
    return max(1, int(settings.SECKILL_TOKEN_SHARED_TTL) // 2)


def token_shared_fill_due() -> int | None:
    """``token_shared_fill`` unless a fill ran within half of SECKILL_TOKEN_SHARED_TTL or
    one is running (the automatic warm-up calls it while a sale is near or live, for the
    operator who did not run ``token_cache_fill``); None when it was not due."""
    if get_redis_connection("default").exists(FILLED_MARK):
        return None
    try:
        return token_shared_fill()
    except TokenFillRunning:
        return None


def token_shared_fill(*, progress=None, chunk: int = 5000) -> int:
    """Every active user's token into the shared cache and every token into a new filter
    that replaces the old one at the end (``manage.py token_cache_fill``, before a sale;
    the automatic warm-up through ``token_shared_fill_due``); ``progress(done)`` is called
    after each chunk. Returns how many entries were cached; raises TokenFillRunning while
    another fill runs."""
    lock = get_redis_connection("default").lock(FILL_LOCK, timeout=_FILL_LOCK_SECONDS)
    if not lock.acquire(blocking=False):
        raise TokenFillRunning
    try:
        return _token_shared_fill(progress=progress, chunk=chunk)
    finally:
        try:
            lock.release()
        except LockError as exc:  # it expired: nothing of ours to release
            logger.warning("token fill lock not released: %s", exc)


def _token_shared_fill(*, progress, chunk: int) -> int:
    User = get_user_model()
    client = get_redis_connection("default")
    capacity = max(2 * Token.objects.count(), TOKEN_FILTER_MIN_CAPACITY)
    bits, hashes = token_filter_size(capacity, settings.SECKILL_TOKEN_FILTER_ERROR_RATE)
    # The next filter exists before the tokens are read: one created meanwhile is added
    # to it by its signal (token_filter_add), so the swap loses no token.
    pipe = client.pipeline(transaction=True)
    pipe.delete(TOKEN_FILTER_NEXT.bits, TOKEN_FILTER_NEXT.params)
    pipe.setbit(TOKEN_FILTER_NEXT.bits, bits - 1, 0)
    pipe.hset(TOKEN_FILTER_NEXT.params, mapping={"bits": bits, "hashes": hashes})
    pipe.expire(TOKEN_FILTER_NEXT.bits, _FILL_LOCK_SECONDS)  # a fill that dies leaves nothing behind
    pipe.expire(TOKEN_FILTER_NEXT.params, _FILL_LOCK_SECONDS)
    pipe.execute()
    rows = (
        Token.objects.order_by()
        .values_list("key", "user_id", f"user__{User.USERNAME_FIELD}", "user__is_active")
        .iterator(chunk_size=chunk)
    )
    done = 0
    batch: list[tuple[str, int, str, bool]] = []

    def flush() -> int:
        run_token_filter_add(client, [TOKEN_FILTER_NEXT], [_token_filter_hashes(_digest(row[0])) for row in batch])
        return token_shared_remember([row[:3] for row in batch if row[3]])

    for row in rows:
        batch.append(row)
        if len(batch) == chunk:
            done += flush()
            batch = []
            if progress:
                progress(done)
    done += flush()
    pipe = client.pipeline(transaction=True)
    pipe.rename(TOKEN_FILTER_NEXT.bits, TOKEN_FILTER.bits)
    pipe.rename(TOKEN_FILTER_NEXT.params, TOKEN_FILTER.params)
    pipe.persist(TOKEN_FILTER.bits)
    pipe.persist(TOKEN_FILTER.params)
    pipe.set(FILLED_MARK, "filled", ex=_filled_mark_seconds())
    pipe.execute()
    if progress:
        progress(done)
    return done


def token_filter_params() -> tuple[int, int]:
    """(bits, hashes) of the filter in use; (0, 0) when there is none."""
    bits, hashes = get_redis_connection("default").hmget(TOKEN_FILTER.params, ["bits", "hashes"])
    return (int(bits), int(hashes)) if bits and hashes else (0, 0)


def token_shared_forget(keys: Iterable[str]) -> None:
    names = [token_shared_key(key) for key in keys]
    if names:
        get_redis_connection("default").delete(*names)


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


# After the commit: what a rolled-back save wrote must not be cached, and the purchase
# path's rule holds here too (no Redis call while a transaction is open).


@receiver(post_save, sender=Token, dispatch_uid="token_shared_created")
def _token_saved(sender, instance, **kwargs):
    keys = [instance.key]
    transaction.on_commit(lambda: _shared_write(token_filter_add, keys))
    if instance.user.is_active:
        entry = (instance.key, instance.user_id, instance.user.get_username())
        transaction.on_commit(lambda: _shared_write(token_shared_remember, [entry]))


@receiver(post_delete, sender=Token, dispatch_uid="token_shared_deleted")
def _token_deleted(sender, instance, **kwargs):
    keys = [instance.key]  # read now: Django clears the primary key after the delete
    transaction.on_commit(lambda: _shared_write(token_shared_forget, keys))


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="token_shared_user_saved")
def _user_saved(sender, instance, **kwargs):
    if not instance.is_active:
        keys = list(Token.objects.filter(user_id=instance.pk).values_list("key", flat=True))
        transaction.on_commit(lambda: _shared_write(token_shared_forget, keys))


def _shared_write(write, entries) -> None:
    # Redis away: the save goes on; a stale entry lives until its TTL, as documented.
    try:
        write(entries)
    except RedisError as exc:
        logger.error("shared token cache not updated (%s); stale entries expire within the TTL", exc)


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
