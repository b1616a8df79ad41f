"""DRF token authentication without a database query per request.

A flash sale sends the same few thousand tokens many times a second; DRF's stock
TokenAuthentication would add a query (token join user) to every purchase. Tokens are
remembered in the process for SECKILL_TOKEN_CACHE_TTL seconds (default 30), so a
deleted token or a deactivated user stops working within that time.
"""

import threading
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

_cache: dict[str, tuple[float, object]] = {}
_lock = threading.Lock()
_MAX_ENTRIES = 100_000


class CachedTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key):
        now = time.monotonic()
        hit = _cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1], key
        row = Token.objects.filter(key=key, user__is_active=True).values_list("user_id", "user__username").first()
        if row is None:
            return super().authenticate_credentials(key)  # raises the proper 401
        user = get_user_model()(pk=row[0], username=row[1], is_active=True)
        user._state.adding = False
        with _lock:
            if len(_cache) >= _MAX_ENTRIES:
                _cache.clear()
            _cache[key] = (now + getattr(settings, "SECKILL_TOKEN_CACHE_TTL", 30.0), user)
        return user, key


def token_cache_clear() -> None:
    with _lock:
        _cache.clear()
