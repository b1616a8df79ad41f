"""One-time captchas: issued per shopper and activity, kept in the cache Redis, and
deleted by the first answer, right or wrong, so none can be used twice or guessed at.

The challenge is a small sum (no images); the point here is the protocol (server-side
state, one attempt, bound to the shopper, short-lived), and the question can be swapped
for a stronger one without touching it. The question is in the request's language
(LocaleMiddleware), so the shop's page shows it in the page's language.
"""

import hmac
import secrets

from django.conf import settings
from django.utils.translation import gettext as _

from .keys import ActivityKeys
from .selectors import gate_redis


def captcha_issue(*, activity_id: int, user_id: int) -> dict:
    a, b = secrets.randbelow(40) + 10, secrets.randbelow(9) + 1
    challenge_id = secrets.token_urlsafe(18)
    ttl = settings.SECKILL_CAPTCHA_TTL
    gate_redis().set(ActivityKeys(activity_id).captcha(challenge_id), f"{user_id}:{a + b}", ex=ttl)
    return {"captcha_id": challenge_id, "question": _("What is %(a)s + %(b)s?") % {"a": a, "b": b}, "expires_in": ttl}


def captcha_consume(*, activity_id: int, user_id: int, challenge_id: str, answer: str) -> bool:
    """True when the challenge exists, belongs to this shopper and the answer is right.

    GETDEL makes the check and the removal one atomic step: two concurrent attempts
    with the same challenge cannot both succeed.
    """
    stored = gate_redis().getdel(ActivityKeys(activity_id).captcha(challenge_id))
    if stored is None:
        return False
    owner, _, expected = stored.decode().partition(":")
    return owner == str(user_id) and hmac.compare_digest(expected.encode(), answer.strip().encode())
