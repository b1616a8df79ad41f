"""The front of the server: a purchase whose refusal this process's memory already knows
is answered here, on the event loop, before Django builds a request.

**The same for every caller.** API.md lets four refusals come before authentication and
before the body is read: no such activity (404), not started or ended (403), sold out
(410). After a sell-out, and before the start, nearly every request of a flood is one of
them. ``seckill.gates.purchase_early_refusal`` decides them from the activity and
sold-out memories.

**Decided by memory.** A token-authenticated JSON purchase from a shopper this process
knows is run through ``seckill.gates.purchase_remembered_refusal`` — ``purchase_admit``
itself, stopped where it would count against the limits in Redis — so a shopper this
process remembers over a limit (429) or as having taken part (409), a bad token or an
invalid body are answered without the thread hop and Django's request.

**The rest of a token purchase.** What the memory cannot decide — a purchase that must
be counted, reserved by the stock script, or a shopper met for the first time — runs the
purchase's view function (``seckill.apis.purchase_token_answer``, the same one the URL's
view calls), with what Django's handler does around a view that this one needs (a stale
database connection closed, the request id), without an ``HttpRequest``, the middleware
chain or the URL resolver; its answer gets the headers the API chain would add. It runs
on the event loop itself when ``seckill.gates.purchase_runs_inline`` says it needs only
memory, two short Redis round trips and, for a new shopper, the loop's token lookup (the
hop to a thread and back cost as much CPU as the purchase: docs/BENCHMARKS.md), its
commands and lookups sent with those of the other purchases of the loop's turn
(``stock.batching``), else on the thread pool. What that function leaves to DRF (a new activity without its token yet),
anything but a token-authenticated JSON purchase, and a body over 4 KiB go on to the
app behind, the body already read handed on with it.

Every rule stays in ``seckill.gates``; the front only decides how a request reaches it.

**The connection stays honest.** An early answer does not wait for a body still
arriving: it is left unread and the answer says ``Connection: close``, so no client reuses
a connection the server is about to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from http import HTTPStatus

from django.conf import settings
from django.core.exceptions import SynchronousOnlyOperation
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host
from django.urls import reverse

from config.request_log import HEADER as REQUEST_ID_HEADER
from config.request_log import request_id_of, request_id_var
from core.errors import ApiError
from core.log_filters import rejection_expected
from seckill.apis import purchase_token_answer
from seckill.gates import purchase_early_refusal, purchase_remembered_refusal, purchase_runs_inline
from seckill.metrics import PURCHASE_URL_NAME, purchase_outcome_count
from seckill.selectors import (
    activity_snapshot,
    activity_snapshot_remembered,
    activity_snapshot_renew,
    activity_snapshot_renewal_due,
    blacklist,
    blacklist_remembered,
    blacklist_renew,
    blacklist_renewal_due,
)
from stock.batching import run_batched

logger = logging.getLogger(__name__)
request_logger = logging.getLogger("django.request")

_PLACEHOLDER = 987654321
_REQUEST_ID = REQUEST_ID_HEADER.lower().encode("ascii")
# A purchase's body is a few dozen bytes; a larger one goes the full way.
MAX_BODY = 4096
# Entries of each of the front's memos (hosts, refusal bodies).
MAX_MEMO = 64


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
    """ASGI, outermost: see the module's docstring. Only ``POST`` to the purchase URL is
    looked at; a ``Host`` that is not allowed or plain HTTP under SECURE_SSL_REDIRECT goes
    on untouched, for Django's middleware to answer."""

    def __init__(self, app, executor):
        self.app = app
        self.executor = executor
        self.purchase_path = purchase_path_pattern()
        self.headers = {
            secure: [(b"content-type", b"application/json"), *security_headers(secure=secure)]
            for secure in (False, True)
        }
        self.redirect_exempt = [re.compile(r) for r in settings.SECURE_REDIRECT_EXEMPT]
        # Memos of what is the same request after request: bounded, so a flood of made-up
        # Host headers or refusal texts cannot grow them.
        self.hosts: dict[str, bool] = {}  # Host header -> allowed, for self.hosts_of
        self.hosts_of: tuple[object, bool] | None = None  # the ALLOWED_HOSTS and DEBUG they are for
        self.refusal_bodies: dict[tuple[int, str, str], bytes] = {}
        self.fills: dict[str, asyncio.Future] = {}  # at most one per name, while it runs

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            match = self.purchase_path.fullmatch(scope["path"])
            if match is not None and self.answerable(scope):
                return await self.purchase(int(match.group(1)), scope, receive, send)
        return await self.app(scope, receive, send)

    async def purchase(self, activity_id: int, scope, receive, send) -> None:
        # With no activity memory (SECKILL_ACTIVITY_CACHE_TTL 0) a lookup would fill nothing.
        if settings.SECKILL_ACTIVITY_CACHE_TTL > 0:
            name = f"activity:{activity_id}"
            if not activity_snapshot_remembered(activity_id)[0]:
                await self.filled(name, activity_snapshot, activity_id)
            elif activity_snapshot_renewal_due(activity_id):
                self.renewed(name, activity_snapshot_renew, activity_id)
        refusal = purchase_early_refusal(activity_id)
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body, more_body = message.get("body", b""), message.get("more_body", False)
        request_id = request_id_of(_header(scope, b"x-request-id") or "")
        if refusal is not None:
            # Early answers do not wait for a body still arriving: it is never read.
            return await self.respond(refusal, scope, send, request_id=request_id, close=more_body, logged=False)
        token = _api_token(scope) if not more_body and len(body) <= MAX_BODY else None
        if token is not None:
            request = FrontRequest(scope, body, request_id)
            answer: Answer | None = self.remembered_refusal(request, activity_id, token)
            if answer is None:
                answer = await self.answer(request, activity_id, token)
            if answer is not None:
                return await self.respond(answer, scope, send, request_id=request_id, close=False, logged=True)
        return await self.app(scope, _replayed(message, receive), send)

    async def filled(self, name: str, fill: Callable[..., object], *args) -> None:
        """This process's memory of ``name`` filled on the thread pool (``fill(*args)``),
        once for all the requests that find it missing at the same moment: a sale's first
        second, a copy that just ran out. One hop and one lookup instead of one each, so
        the pool's threads do not take the GIL from the event loop, which must go on
        accepting the flood's connections. Whatever goes wrong there is the full path's
        to answer."""
        try:
            await asyncio.shield(self.fill_started(name, fill, *args))  # a client that leaves cancels no one's fill
        except Exception as exc:
            logger.debug("front: %s not filled: %s", name, exc)

    def renewed(self, name: str, renew: Callable[..., object], *args) -> None:
        """A copy of ``name`` that still lasts but is near its end (``*_renewal_due``)
        renewed on the thread pool, with nobody waiting: the requests go on with it, and
        none finds it missing. Whatever goes wrong there leaves it to run out (then
        ``filled``)."""
        try:
            self.fill_started(name, renew, *args)
        except RuntimeError as exc:  # the pool is shutting down
            logger.debug("front: %s not renewed: %s", name, exc)

    def fill_started(self, name: str, fill: Callable[..., object], *args) -> asyncio.Future:
        """``fill(*args)`` on the thread pool, unless a fill of ``name`` runs already: the
        one running."""
        running = self.fills.get(name)
        if running is None:
            running = asyncio.get_running_loop().run_in_executor(self.executor, fill, *args)
            self.fills[name] = running
            running.add_done_callback(lambda done: self._fill_done(name, done))
        return running

    def _fill_done(self, name: str, done: asyncio.Future) -> None:
        self.fills.pop(name, None)
        if not done.cancelled():
            done.exception()  # retrieved, even if every waiter left

    def remembered_refusal(self, request: FrontRequest, activity_id: int, token: str) -> ApiError | None:
        """A token-authenticated JSON purchase whose refusal this process's memory decides."""
        try:
            data = json.loads(request.body)
        except (ValueError, RecursionError):
            return None  # the full path answers 400
        return purchase_remembered_refusal(request, activity_id=activity_id, token=token, data=data)

    async def answer(self, request: FrontRequest, activity_id: int, token: str) -> Answer | None:
        """On the event loop when ``seckill.gates.purchase_runs_inline`` says the purchase
        needs only memory, Redis and the loop's token lookup; anything else on the pool."""
        if settings.SECKILL_BLACKLIST_CACHE_TTL > 0:
            if not blacklist_remembered():
                await self.filled("blacklist", blacklist)
            elif blacklist_renewal_due():
                self.renewed("blacklist", blacklist_renew)
        if purchase_runs_inline(activity_id):
            inline = await self.answer_inline(request, activity_id)
            if not isinstance(inline, OnPool):
                return inline
        return await self.answer_on_pool(request, activity_id)

    async def answer_inline(self, request: FrontRequest, activity_id: int) -> Answer | OnPool | None:
        """The purchase's view function on the event loop itself, its Redis commands and
        token lookups sent with those of the other purchases of the loop turn
        (``stock.batching``); ``ON_POOL`` when a copy ran out of memory just now (Django
        refuses a query on the loop before it connects; the pool runs the purchase again,
        and a limit it counted is counted again)."""
        try:
            return await run_batched(_view_inline, request, activity_id, expected=(SynchronousOnlyOperation,))
        except SynchronousOnlyOperation:
            logger.info("purchase of activity %s needed the database on the event loop: run on the pool", activity_id)
            return ON_POOL
        except Exception:
            logger.exception("purchase of activity %s failed", activity_id)
            return ApiError(500, "server_error", "Something went wrong on our side; please try again.")

    async def answer_on_pool(self, request: FrontRequest, activity_id: int) -> Answer | None:
        """The purchase's view function (``seckill.apis.purchase_token_answer``) on the thread
        pool (``_view_call``); None: DRF's view answers. A bug
        is logged and answered 500 in the API's shape, as Django would."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor, _view_call, request, activity_id)
        except Exception:
            logger.exception("purchase of activity %s failed", activity_id)
            return ApiError(500, "server_error", "Something went wrong on our side; please try again.")

    def answerable(self, scope) -> bool:
        """What Django's middleware would answer first stays theirs: a Host that is not
        allowed (400) and plain HTTP under SECURE_SSL_REDIRECT (the redirect)."""
        if not self.host_allowed(_header(scope, b"host") or ""):
            return False
        if settings.SECURE_SSL_REDIRECT and not _secure(scope):
            path = scope["path"].lstrip("/")
            return any(pattern.search(path) for pattern in self.redirect_exempt)
        return True

    def host_allowed(self, host: str) -> bool:
        """HttpRequest.get_host's verdict on a Host header, remembered for the few hosts a
        site is called by (it was a fifth of an early answer's CPU)."""
        allowed, debug = settings.ALLOWED_HOSTS, settings.DEBUG
        seen = self.hosts_of
        if seen is None or seen[0] is not allowed or seen[1] != debug:  # changed: the verdicts are stale
            self.hosts, self.hosts_of = {}, (allowed, debug)
        verdict = self.hosts.get(host)
        if verdict is None:
            if debug and not allowed:
                allowed = [".localhost", "127.0.0.1", "[::1]"]  # as HttpRequest.get_host
            domain, _port = split_domain_port(host)
            verdict = bool(domain) and validate_host(domain, allowed)
            if len(self.hosts) < MAX_MEMO:
                self.hosts[host] = verdict
        return verdict

    def refusal_body(self, refusal: ApiError) -> bytes:
        """A refusal's JSON body, encoded once: the flood's refusals are a handful of texts."""
        key = (refusal.status, refusal.code, refusal.detail)
        body = self.refusal_bodies.get(key)
        if body is None:
            body = json.dumps({"code": refusal.code, "detail": refusal.detail}).encode()
            if len(self.refusal_bodies) < MAX_MEMO:
                self.refusal_bodies[key] = body
        return body

    async def respond(self, answer: Answer, scope, send, *, request_id: str, close: bool, logged: bool) -> None:
        """The JSON answer with the API chain's headers, counted in the purchase metric.
        ``logged``: a 4xx or 5xx gets the log line Django's ``log_response`` would write,
        except the flood's expected refusals (core.log_filters); the early answers, the
        same for everyone by the thousand a second, are counted and never logged."""
        code: str | None
        if isinstance(answer, ApiError):
            status, code, extra = answer.status, answer.code, answer.headers()
            body = self.refusal_body(answer)
        else:
            (status, payload), extra = answer, {}
            code, body = payload.get("code"), json.dumps(payload).encode()
        if logged and status >= 400 and not rejection_expected(status, code):
            level = logging.ERROR if status >= 500 else logging.WARNING
            request_logger.log(level, "%s: %s", HTTPStatus(status).phrase, scope["path"], extra={"status_code": status})
        headers = [
            *self.headers[_secure(scope)],
            (b"content-length", str(len(body)).encode("ascii")),
            (_REQUEST_ID, request_id.encode("ascii")),
            *((name.lower().encode("ascii"), value.encode("latin1")) for name, value in extra.items()),
        ]
        if close:
            headers.append((b"connection", b"close"))
        purchase_outcome_count(str(code or f"http_{status}"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


# What the front answers: (status, JSON body) or a refusal.
Answer = tuple[int, dict] | ApiError


class OnPool:
    """answer_inline's "run it on the thread pool instead"."""


ON_POOL = OnPool()


@contextlib.contextmanager
def _pool_turn() -> Iterator[None]:
    """What Django's request signals do on a pool thread that the front's work there needs:
    a database connection that went stale or past CONN_MAX_AGE closed before and after (the
    request_started and request_finished receivers). The signals themselves are not sent:
    their other receivers reset what the front never touches (the URLconf, the caches'
    connections, DEBUG's query log), and dispatching them was a sixth of the view's CPU."""
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


def _view_call(request: FrontRequest, activity_id: int) -> Answer | None:
    """The view on a pool thread, with the request id for its log lines, inside ``_pool_turn``."""
    request_id_var.set(request.request_id)
    with _pool_turn():
        return purchase_token_answer(request, activity_id=activity_id)


def _view_inline(request: FrontRequest, activity_id: int) -> Answer | None:
    """The view on the event loop's thread, with the request id for its log lines: that
    thread never holds a Django database connection (the token lookup has the loop's own)."""
    request_id_var.set(request.request_id)
    return purchase_token_answer(request, activity_id=activity_id)


def _api_token(scope) -> str | None:
    """The key of ``Authorization: Token <key>`` on a JSON request; None otherwise."""
    authorization = _header(scope, b"authorization") or ""
    content_type = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "token" or not token or " " in token or content_type != "application/json":
        return None
    return token


class FrontRequest:
    """What the purchase reads of a request — ``META`` (the client's address and headers,
    as Django names them), the method, the content type and the body — built from the
    ASGI scope without a Django request."""

    __slots__ = ("META", "body", "request_id")
    method = "POST"
    content_type = "application/json"

    def __init__(self, scope, body: bytes, request_id: str):
        meta: dict[str, str] = {"REMOTE_ADDR": scope["client"][0] if scope.get("client") else ""}
        for name, value in scope["headers"]:
            key = "HTTP_" + name.decode("latin1").upper().replace("-", "_")
            text = value.decode("latin1")
            meta[key] = f"{meta[key]},{text}" if key in meta else text
        self.META = meta
        self.body = body
        self.request_id = request_id


def _replayed(message, receive):
    """A receive that hands the app the message read already, then the rest."""
    pending = [message]

    async def replay():
        return pending.pop() if pending else await receive()

    return replay


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
