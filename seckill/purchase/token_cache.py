"""The shared token cache in the cache Redis, which every web process reads before
PostgreSQL (seckill.purchase.authentication): token digest -> "user_id:username:mac", each
entry signed with a key derived from SECRET_KEY; the token filter (a Bloom filter of every
token's digest) that refuses made-up tokens in the same call; the refused-token cache; the
fill before a sale (``manage.py token_cache_fill``, and automatically while a sale is near);
and the signals that keep all of it in step with the Token and User tables."""

import functools
import hashlib
import hmac
import logging
import math
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django_redis import get_redis_connection
from redis import RedisError
from redis.exceptions import LockError
from rest_framework.authtoken.models import Token

from stock.redis_client import cache_redis
from stock.scripts import RateLimit, TokenFilter, TokenLookup, run_token_filter_add

logger = logging.getLogger(__name__)


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


def shopper_of_entry(key: str, entry: str) -> tuple[int, str] | None:
    """(user id, username) an entry names, if this project wrote it for this token; else None."""
    head, _, mac = entry.rpartition(":")
    user_id, _, username = head.partition(":")
    if not user_id.isdigit() or not hmac.compare_digest(mac, _entry_mac(_digest(key), int(user_id), username)):
        logger.warning("a shared token cache entry with a wrong signature was ignored")
        return None
    return int(user_id), username


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
