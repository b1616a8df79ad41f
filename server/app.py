"""The ASGI application gunicorn's uvicorn workers serve (``config.asgi``).

In front of it stands nginx (deploy/nginx/shop.conf), which buffers slow clients and caps
what they send; this application still defends itself when reached directly:

* **Header names with an underscore are dropped.** A client's ``X_Forwarded_For`` must never
  read as the proxy's ``X-Forwarded-For`` (WSGI folds both into ``HTTP_X_FORWARDED_FOR``):
  Django's own ASGI handler, nginx and gunicorn's WSGI workers drop them too.
* **Every body is read here, on the event loop**, within ``BODY_TIMEOUT`` and ``MAX_BODY``
  (``PURCHASE_MAX_BODY`` for a purchase), before a thread of the pool is given the request:
  a client that sends slowly holds a coroutine, never a thread. Too slow: 408; too large: 413.
* **The purchase has one way into the sale** (``purchase``): the refusals that are the same
  for everyone come from this process's memory on the loop (API.md lets them come before
  authentication); a token-authenticated JSON purchase runs ``seckill.purchase.apis.purchase_token_answer``
  once on the pool; every answer is built by ``server.answers``. A purchase with a session
  (the shop's page) goes to Django's view, which runs the same checks.
* **Everything else goes to Django**: a token-authenticated API call straight to the short
  API chain on the pool (``ApiTokenHandler.answer``), the rest through a2wsgi.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re

from a2wsgi import WSGIMiddleware
from django.conf import settings
from django.core.exceptions import SynchronousOnlyOperation
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone

from core.errors import ApiError
from core.loop_bridge import run_on_loop
from seckill.metrics import PURCHASE_URL_NAME, purchase_outcome_count
from seckill.purchase.apis import purchase_token_answer
from seckill.purchase.gates import purchase_early_refusal, purchase_runs_inline
from server.request_log import request_id_of, request_id_var

from .answers import send_error, send_json
from .handlers import StackDispatcher, is_token_api_request, web_threads
from .handlers import get_application as django_application

# What a client may take to send a body, and how large it may be (as nginx's
# client_body_timeout and client_max_body_size, for a client that reaches gunicorn directly).
BODY_TIMEOUT = 10.0
MAX_BODY = 1 << 20
# A purchase's body is a few dozen bytes (a token of at most 128 characters, a quantity).
PURCHASE_MAX_BODY = 4096

logger = logging.getLogger(__name__)

_PLACEHOLDER = 987654321


def purchase_path_pattern() -> re.Pattern[str]:
    """The purchase URL from the URLconf (its one home), as a pattern with the activity id."""
    path = reverse(PURCHASE_URL_NAME, kwargs={"activity_id": _PLACEHOLDER})
    before, after = path.split(str(_PLACEHOLDER))
    return re.compile(f"{re.escape(before)}([0-9]{{1,19}}){re.escape(after)}")


class BodyRefused(Exception):
    def __init__(self, error: ApiError, *, close: bool):
        self.error, self.close = error, close


class ClientGone(Exception):
    pass


class Shop:
    def __init__(self, stacks: StackDispatcher):
        self.stacks = stacks
        self.site = WSGIMiddleware(stacks, workers=web_threads())
        self.pool = self.site.executor  # one pool for every thread a request takes
        self.purchase_path = purchase_path_pattern()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.site(scope, receive, send)  # lifespan
        scope = _without_underscore_names(scope)
        purchase = self.purchase_path.fullmatch(scope["path"]) if scope["method"] == "POST" else None
        try:
            body = await _body(receive, PURCHASE_MAX_BODY if purchase else MAX_BODY)
        except ClientGone:
            return
        except BodyRefused as refused:
            return await send_error(
                send,
                refused.error,
                secure=_secure(scope),
                request_id=_request_id(scope),
                path=scope["path"],
                close=refused.close,
            )
        if purchase is not None and await self.purchase(int(purchase.group(1)), scope, body, send):
            return
        if is_token_api_request(scope["path"], _header(scope, b"authorization")):
            return await self.api(scope, body, send)
        return await self.site(scope, _replayed(body, receive), send)

    async def purchase(self, activity_id: int, scope, body: bytes, send) -> bool:
        """The purchase's one way into the sale; False when Django's view must answer it (a
        session's purchase from the shop's page)."""
        request_id = _request_id(scope)
        refusal = purchase_early_refusal(activity_id, timezone.now())
        if refusal is None:
            if not _token_json(scope):
                return False
            answer = await self.purchase_run(PurchaseRequest(scope, body, request_id), activity_id)
        else:
            answer = refusal
            purchase_outcome_count(refusal.code, activity_id)  # this process's memory knows the sale
        secure = _secure(scope)
        if isinstance(answer, ApiError):
            await send_error(
                send, answer, secure=secure, request_id=request_id, path=scope["path"], logged=refusal is None
            )
        else:
            status, payload = answer
            await send_json(send, status, json.dumps(payload).encode(), secure=secure, request_id=request_id)
        return True

    async def purchase_run(self, request: PurchaseRequest, activity_id: int):
        """The sale's one entry (``purchase_token_answer``), once: on the event loop when it
        waits only on Redis (``purchase_runs_inline``), else on the pool. One that meets
        the database on the loop after all (a copy that ran out between the check and its
        use, the reserve's hand-over) is refused there before it writes anything of its own
        and runs again on the pool. Each way counts the answer it gives (seckill.metrics)."""
        if purchase_runs_inline(activity_id):
            try:
                return await run_on_loop(_purchase_on_loop, request, activity_id)
            except SynchronousOnlyOperation:
                logger.info("purchase of activity %s needed the database on the loop: run on the pool", activity_id)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, _purchase_on_thread, request, activity_id)

    async def api(self, scope, body: bytes, send) -> None:
        request = ASGIRequest(scope, io.BytesIO(body))
        loop = asyncio.get_running_loop()
        status, headers, content = await loop.run_in_executor(self.pool, self.stacks.api.answer, request)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


def _answer_code(answer: tuple[int, dict] | ApiError) -> str:
    return answer.code if isinstance(answer, ApiError) else str(answer[1].get("code"))


def _purchase_on_loop(request: PurchaseRequest, activity_id: int):
    request_id_var.set(request.request_id)
    answer = purchase_token_answer(request, activity_id=activity_id)
    purchase_outcome_count(_answer_code(answer), activity_id)  # inline: this process's memory knows the sale
    return answer


def _purchase_on_thread(request: PurchaseRequest, activity_id: int):
    """The purchase on a pool thread, with the request id for its log lines and what
    Django's request signals would do for it: a database connection gone stale or past
    CONN_MAX_AGE closed before and after."""
    request_id_var.set(request.request_id)
    close_old_connections()
    try:
        answer = purchase_token_answer(request, activity_id=activity_id)
        # Off the loop: the sale may be looked up when this process does not remember it.
        purchase_outcome_count(_answer_code(answer), activity_id, look_up=True)
        return answer
    finally:
        close_old_connections()


class PurchaseRequest:
    """What the purchase reads of a request — ``META`` (the client's address and headers,
    as Django names them), the body — built from the ASGI scope without a Django request."""

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


async def _body(receive, limit: int) -> bytes:
    """The whole body, read within BODY_TIMEOUT. BodyRefused: too slow (408), or over
    ``limit`` (413) — read to its end up to MAX_BODY all the same, so that the connection
    can carry the next request (closing it with bytes unread would reset it, and the client
    could lose the answer)."""
    chunks, size = [], 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                size += len(chunk)
                if size <= limit:
                    chunks.append(chunk)
                if not message.get("more_body", False) or size > MAX_BODY:
                    break
    except TimeoutError:
        error = ApiError(408, "request_timeout", "The request body did not arrive in time.")
        raise BodyRefused(error, close=True) from None
    if size > limit:
        error = ApiError(413, "payload_too_large", f"The request body is over {limit} bytes.")
        raise BodyRefused(error, close=size > MAX_BODY)
    return b"".join(chunks)


def _replayed(body: bytes, receive):
    """A receive that hands the app the body read already, then the client's own (which
    tells of a disconnect)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _without_underscore_names(scope) -> dict:
    headers = scope["headers"]
    if not any(b"_" in name for name, _ in headers):
        return scope
    return {**scope, "headers": [(name, value) for name, value in headers if b"_" not in name]}


def _token_json(scope) -> bool:
    """``Authorization: Token <key>`` and a JSON body: an API client's purchase."""
    scheme, _, key = _header(scope, b"authorization").partition(" ")
    content_type = _header(scope, b"content-type").split(";", 1)[0].strip().lower()
    return scheme.lower() == "token" and bool(key) and " " not in key and content_type == "application/json"


def _secure(scope) -> bool:
    """HttpRequest.is_secure, from the scope: the trusted proxy's header, or the scheme."""
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        name, expected = proxy
        value = _header(scope, name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin1"))
        if value:
            return value.split(",", 1)[0].strip() == expected
    return scope.get("scheme") == "https"


def _request_id(scope) -> str:
    return request_id_of(_header(scope, b"x-request-id"))


def _header(scope, name: bytes) -> str:
    """A header's value ("" when absent); repeated, its values joined by commas (as
    ASGIRequest.META)."""
    return ",".join(value.decode("latin1") for key, value in scope["headers"] if key == name)


@receiver(connection_created)
def _statement_deadline(sender, connection, **kwargs) -> None:
    """Every database connection of the web tier: a statement (lock waits included) that
    runs past WEB_STATEMENT_TIMEOUT is cancelled by PostgreSQL itself, so the request
    answers 503 busy and no backend goes on working for nobody."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = %s", [int(settings.WEB_STATEMENT_TIMEOUT * 1000)])


def get_application() -> Shop:
    """The application gunicorn's uvicorn workers serve (``config.asgi``); Django is set up."""
    return Shop(django_application())
