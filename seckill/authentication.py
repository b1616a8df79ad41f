"""DRF authentication without a database query per request.

A flash sale sends the same few thousand shoppers many times a second; DRF's stock
TokenAuthentication adds a query (token join user) to every purchase, and its
SessionAuthentication loads the user row behind every browser request. Both are
remembered in the process for SECKILL_TOKEN_CACHE_TTL seconds (default 30), so a
deleted token, a deactivated user or a session invalidated by a password change stops
working within that time.
"""

import threading
import time

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.db import connection
from drf_spectacular.authentication import SessionScheme
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token

_cache: dict[object, tuple[float, object]] = {}
_lock = threading.Lock()
_MAX_ENTRIES = 100_000


def _cached(key):
    hit = _cache.get(key)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    return None


def _remember(key, user) -> None:
    with _lock:
        if len(_cache) >= _MAX_ENTRIES:
            _cache.clear()
        _cache[key] = (time.monotonic() + settings.SECKILL_TOKEN_CACHE_TTL, user)


def _token_user_sql() -> str:
    User = get_user_model()
    return (
        f"SELECT u.{User._meta.pk.column}, u.{User.USERNAME_FIELD} FROM {Token._meta.db_table} t"
        f" JOIN {User._meta.db_table} u ON u.{User._meta.pk.column} = t.user_id"
        " WHERE t.key = %s AND u.is_active"
    )


class CachedTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key):
        user = _cached(("token", key))
        if user is not None:
            return user, key
        # A cache miss is the first request of a shopper in this process: in a flood that
        # is most requests, so the lookup is one plain SQL statement, not a compiled ORM query.
        with connection.cursor() as cursor:
            cursor.execute(_token_user_sql(), [key])
            row = cursor.fetchone()
        if row is None:
            return super().authenticate_credentials(key)  # raises the proper 401
        User = get_user_model()
        user = User(pk=row[0], is_active=True, **{User.USERNAME_FIELD: row[1]})
        user._state.adding = False
        _remember(("token", key), user)
        return user, key


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
    with _lock:
        _cache.clear()


class CachedSessionScheme(SessionScheme):
    """Documents CachedSessionAuthentication in /api/schema/ as the session cookie it is
    (without this, drf-spectacular warns, and `check --deploy` is not clean)."""

    target_class = "seckill.authentication.CachedSessionAuthentication"
