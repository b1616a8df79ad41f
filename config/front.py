"""The front of the server: a purchase whose answer is the same for every caller is
answered here, from this process's memory, before Django builds a request.

API.md lets four refusals come before authentication and before the body is read: no
such activity (404), not started or ended (403), sold out (410). In a flood nearly every
request after the sell-out is one of them; answered by the full path each costs a Django
request, the middleware, the URL resolver and the token lookup, for an answer known in
advance. ``EarlyAnswers`` asks ``seckill.gates.purchase_early_refusal`` — the rules' one
home, the same checks the full path runs — and answers at once when it has a refusal;
everything else goes on to the app behind it.

**The connection stays honest.** The answer is decided before the body is read. The
body is read now (one receive: it usually came with the headers) so the connection can
carry the client's next request; a body that is not all there yet is left unread and the
answer says ``Connection: close``, so no client reuses a connection the server is about
to close.
"""

from __future__ import annotations

import json
import re

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import reverse

from config.request_log import HEADER as REQUEST_ID_HEADER
from config.request_log import request_id_of
from core.errors import ApiError
from seckill.gates import purchase_early_refusal
from seckill.metrics import PURCHASE_URL_NAME, purchase_outcome_count

_PLACEHOLDER = 987654321


def purchase_path_pattern() -> re.Pattern[str]:
    """The purchase URL from the URLconf (its one home), as a pattern with the activity id."""
    path = reverse(PURCHASE_URL_NAME, kwargs={"activity_id": _PLACEHOLDER})
    before, after = path.split(str(_PLACEHOLDER))
    return re.compile(f"{re.escape(before)}([0-9]{{1,19}}){re.escape(after)}")


def security_headers(*, secure: bool) -> list[tuple[bytes, bytes]]:
    """What django.middleware.security.SecurityMiddleware adds to an API answer."""
    headers = []
    if secure and settings.SECURE_HSTS_SECONDS:
        value = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            value += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            value += "; preload"
        headers.append((b"strict-transport-security", value.encode("ascii")))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        value = policy if isinstance(policy, str) else ",".join(policy)
        headers.append((b"referrer-policy", value.encode("ascii")))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append((b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode("ascii")))
    return headers


class EarlyAnswers:
    """ASGI, outermost: see the module's docstring."""

    def __init__(self, app):
        self.app = app
        self.purchase_path = purchase_path_pattern()
        self.headers = {
            secure: [(b"content-type", b"application/json"), *security_headers(secure=secure)]
            for secure in (False, True)
        }
        self.allowed_hosts = settings.ALLOWED_HOSTS
        if settings.DEBUG and not self.allowed_hosts:
            self.allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]  # as HttpRequest.get_host
        self.redirect_exempt = [re.compile(r) for r in settings.SECURE_REDIRECT_EXEMPT]

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            match = self.purchase_path.fullmatch(scope["path"])
            if match is not None and self.answerable(scope):
                refusal = purchase_early_refusal(int(match.group(1)))
                if refusal is not None:
                    return await self.answer(refusal, scope, receive, send)
        return await self.app(scope, receive, send)

    def answerable(self, scope) -> bool:
        """What Django's middleware would answer first stays theirs: a Host that is not
        allowed (400) and plain HTTP under SECURE_SSL_REDIRECT (the redirect)."""
        domain, _port = split_domain_port(_header(scope, b"host") or "")
        if not domain or not validate_host(domain, self.allowed_hosts):
            return False
        if settings.SECURE_SSL_REDIRECT and not _secure(scope):
            path = scope["path"].lstrip("/")
            return any(pattern.search(path) for pattern in self.redirect_exempt)
        return True

    async def answer(self, refusal: ApiError, scope, receive, send) -> None:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body = json.dumps({"code": refusal.code, "detail": refusal.detail}).encode()
        request_id = request_id_of(_header(scope, b"x-request-id") or "")
        headers = [
            *self.headers[_secure(scope)],
            (b"content-length", str(len(body)).encode("ascii")),
            (REQUEST_ID_HEADER.lower().encode("ascii"), request_id.encode("ascii")),
            *((name.lower().encode("ascii"), value.encode("latin1")) for name, value in refusal.headers().items()),
        ]
        if message.get("more_body", False):
            headers.append((b"connection", b"close"))  # the rest of the body is never read
        purchase_outcome_count(refusal.code)
        await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _secure(scope) -> bool:
    """HttpRequest.is_secure, from the scope: the scheme, or the trusted proxy's header."""
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        name, expected = proxy
        value = _header(scope, name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin1"), None)
        if value is not None:
            return value.split(",", 1)[0].strip() == expected
    return scope.get("scheme") == "https"


def _header(scope, name: bytes, default: str | None = "") -> str | None:
    """A header's value; repeated, its values joined by commas (as ASGIRequest.META)."""
    values = [value.decode("latin1") for key, value in scope["headers"] if key == name]
    return ",".join(values) if values else default
