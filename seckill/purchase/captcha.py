"""One-time captchas: issued per shopper and activity, kept in the cache Redis, and
deleted by the first answer, right or wrong, so none can be used twice or guessed at.

The challenge is a small sum (no images); the point here is the protocol (server-side
state, one attempt, bound to the shopper, short-lived), and the question can be swapped
for a stronger one without touching it. The question is in the request's language
(LocaleMiddleware), so the shop's page shows it in the page's language.

With the cache Redis away no challenge can be kept or checked: both answer 503 ``busy``
(never a challenge that cannot be answered, never a purchase past an unchecked one).
"""

import hmac
import logging
import secrets

import redis
from django.conf import settings
from django.utils.translation import gettext as _

from core.errors import busy
from stock.keys import ActivityKeys
from stock.redis_client import cache_redis

logger = logging.getLogger(__name__)

_AWAY = "The security check is unavailable just now; please try again in a moment."


def captcha_issue(*, activity_id: int, user_id: int) -> dict:
    a, b = secrets.randbelow(40) + 10, secrets.randbelow(9) + 1
    challenge_id = secrets.token_urlsafe(18)
    ttl = settings.SECKILL_CAPTCHA_TTL
    try:
        cache_redis().set(ActivityKeys(activity_id).captcha(challenge_id), f"{user_id}:{a + b}", ex=ttl)
    except redis.RedisError as exc:
        logger.warning("captcha of activity %s not issued, Redis unavailable: %s", activity_id, exc)
        raise busy(_AWAY) from exc
    return {"captcha_id": challenge_id, "question": _("What is %(a)s + %(b)s?") % {"a": a, "b": b}, "expires_in": ttl}


def captcha_consume(*, activity_id: int, user_id: int, challenge_id: str, answer: str) -> bool:
    """True when the challenge exists, belongs to this shopper and the answer is right;
    ApiError ``busy`` when Redis cannot say.

    GETDEL makes the check and the removal one atomic step: two concurrent attempts
    with the same challenge cannot both succeed.
    """
    try:
        stored = cache_redis().getdel(ActivityKeys(activity_id).captcha(challenge_id))
    except redis.RedisError as exc:
        logger.warning("captcha of activity %s not checked, Redis unavailable: %s", activity_id, exc)
        raise busy(_AWAY) from exc
    if stored is None:
        return False
    text = stored.decode() if isinstance(stored, bytes) else stored
    owner, _, expected = text.partition(":")
    return owner == str(user_id) and hmac.compare_digest(expected.encode(), answer.strip().encode())
