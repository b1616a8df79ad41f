"""DRF authentication without a database query per request.

A flash sale sends the same few thousand shoppers many times a second; DRF's stock
TokenAuthentication adds a query (token join user) to every purchase, and its
SessionAuthentication loads the user row behind every browser request. Both are
remembered in the process for SECKILL_TOKEN_CACHE_TTL seconds (default 30), so a
deleted token, a deactivated user or a session invalidated by a password change stops
working within that time.

A token a process has not seen yet (in a flash crowd: nearly every purchase, one per
shopper) is looked up in the cache Redis before PostgreSQL: one GET instead of a query,
shared by every web process. Tokens enter it when created (signal), on a database
lookup, and in bulk before a sale (``manage.py token_cache_fill``); deleting a token or
saving its user inactive removes it at once. A change that bypasses model signals
(``QuerySet.update``) is seen after SECKILL_TOKEN_SHARED_TTL (default 6 h).
"""

import hashlib
import logging
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django_redis import get_redis_connection
from drf_spectacular.authentication import SessionScheme
from redis import RedisError
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token

from core.memory import ProcessMemory

logger = logging.getLogger(__name__)

# ("token", key) -> TokenShopper, ("session", user id, auth hash) -> User; never None.
_memory: ProcessMemory[tuple, object] = ProcessMemory("seckill.authentication", max_entries=100_000)
_cached = _memory.get


def _remember(key, user) -> None:
    _memory.put(key, user, settings.SECKILL_TOKEN_CACHE_TTL)


def _token_user_sql() -> str:
    User = get_user_model()
    return (
        f"SELECT u.{User._meta.pk.column}, u.{User.USERNAME_FIELD} FROM {Token._meta.db_table} t"
        f" JOIN {User._meta.db_table} u ON u.{User._meta.pk.column} = t.user_id"
        " WHERE t.key = %s AND u.is_active"
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


# --- the shared cache: token digest -> "user_id:username" in the cache Redis -----------

SHARED_PREFIX = "auth:token:"


def token_shared_key(key: str) -> str:
    # A digest, not the credential: a reader of Redis cannot use what it finds there.
    return SHARED_PREFIX + hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()


def _shared_get(key: str):
    try:
        value = get_redis_connection("default").get(token_shared_key(key))
    except RedisError as exc:
        logger.warning("shared token cache not read: %s", exc)
        return None
    return None if value is None else _shopper_of_entry(value.decode())


def _shopper_of_entry(entry: str) -> TokenShopper:
    user_id, _, username = entry.partition(":")
    return TokenShopper(int(user_id), username)


def token_known(key: str) -> TokenShopper | None:
    """The shopper of a token this process remembers, without any I/O."""
    known = _cached(("token", key))
    return known if isinstance(known, TokenShopper) else None  # what ("token", key) holds, or None


def token_shopper_from_entry(key: str, entry: str) -> TokenShopper:
    """The shopper of a token whose shared-cache entry the caller read (the purchase's
    gate script); remembered in this process like any other lookup."""
    known = _shopper_of_entry(entry)
    _remember(("token", key), known)
    return known


def token_shared_remember(entries: Iterable[tuple[str, int, str]]) -> int:
    """Put (key, user id, username) triples in the shared cache; returns how many."""
    ttl = int(settings.SECKILL_TOKEN_SHARED_TTL)
    client = get_redis_connection("default")
    done = 0
    pipe = client.pipeline(transaction=False)
    for key, user_id, username in entries:
        pipe.set(token_shared_key(key), f"{user_id}:{username}", ex=ttl)
        done += 1
        if done % 1000 == 0:
            pipe.execute()
    pipe.execute()
    return done


def token_shared_fill(*, progress=None, chunk: int = 5000) -> int:
    """Every active user's token into the shared cache (``manage.py token_cache_fill``,
    before a sale); ``progress(done)`` is called after each chunk."""
    User = get_user_model()
    rows = (
        Token.objects.filter(user__is_active=True)
        .order_by()
        .values_list("key", "user_id", f"user__{User.USERNAME_FIELD}")
        .iterator(chunk_size=chunk)
    )
    done = 0
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == chunk:
            done += token_shared_remember(batch)
            batch = []
            if progress:
                progress(done)
    done += token_shared_remember(batch)
    if progress:
        progress(done)
    return done


def token_shared_forget(keys: Iterable[str]) -> None:
    names = [token_shared_key(key) for key in keys]
    if names:
        get_redis_connection("default").delete(*names)


def token_shopper(key: str, *, shared_read: bool = True) -> TokenShopper:
    """The shopper of an API token; raises AuthenticationFailed as DRF would.
    ``shared_read=False``: the caller has just read the shared cache (the gate script)."""
    known = token_known(key)
    if known is not None:
        return known
    # A miss is the first request of a shopper in this process: in a flood that is most
    # requests. The shared cache answers most; else one plain SQL statement, not an ORM query.
    known = _shared_get(key) if shared_read else None
    if known is None:
        with connection.cursor() as cursor:
            cursor.execute(_token_user_sql(), [key])
            row = cursor.fetchone()
        if row is None:
            user, _ = TokenAuthentication().authenticate_credentials(key)  # raises the proper 401
            row = (user.pk, user.get_username())
        known = TokenShopper(*row)
        try:
            token_shared_remember([(key, *row)])
        except RedisError as exc:
            logger.warning("shared token cache not written: %s", exc)
    _remember(("token", key), known)
    return known


class CachedTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key):
        return token_shopper(key).user, key


# After the commit: what a rolled-back save wrote must not be cached, and the purchase
# path's rule holds here too (no Redis call while a transaction is open).


@receiver(post_save, sender=Token, dispatch_uid="token_shared_created")
def _token_saved(sender, instance, **kwargs):
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

    target_class = "seckill.authentication.CachedSessionAuthentication"
