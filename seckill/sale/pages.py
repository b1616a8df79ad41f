"""The activity page: rendered from the activity alone, so its bytes are the same for
every visitor and a CDN may keep it. Used by the view and by `publish`."""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from core.memory import ProcessMemory, shallow_size
from seckill.models import Activity
from seckill.sale.activities import activity_flag
from seckill.sale.selectors import units_left_many
from seckill.sale.snapshot import ActivitySnapshot
from seckill.sale.soldout import sold_out_known


@dataclass(frozen=True)
class RenderedPage:
    body: bytes
    etag: str
    last_modified: datetime
    language: str


def page_languages() -> list[str]:
    return [code for code, _ in settings.LANGUAGES]


def activity_page_path(*, activity_id: int, language: str) -> str:
    """The URL of the page in one language: the default language has no prefix."""
    if language == settings.LANGUAGE_CODE:
        return reverse("activity-page", args=[activity_id])
    return reverse("activity-page-lang", kwargs={"language": language, "activity_id": activity_id})


def page_flag(*, activity: ActivitySnapshot, now: datetime) -> dict:
    """The flag the page polls (flag.js and the JSON flag): the contract's fields, plus what
    is left to sell, for the live state the cached page cannot carry. ``remaining`` is the
    figure the list shows (the units for sale, the reserve's included), None when unknown
    (not warmed, Redis away); ``sold_out`` is true when it is 0, or while this process
    remembers a purchase being told so (no Redis read then): the same fact either way."""
    flag = activity_flag(activity=activity, now=now)
    remaining = 0 if sold_out_known(activity.id) else units_left_many([activity.id])[activity.id]
    flag["remaining"] = max(0, remaining) if remaining is not None else None
    flag["sold_out"] = remaining is not None and remaining <= 0
    return flag


def page_strings() -> dict[str, str]:
    """What the page script says, in the active language (%(name)s is filled in by the script)."""
    return {
        "starts_in": _("Starts in %(time)s"),
        "starting": _("Starting…"),
        "on_sale": _("On sale now!"),
        "ends_in": _("Ends in %(time)s"),
        "ended": _("The sale has ended."),
        "days": _("%(days)s d"),
        "hint_wait_start": _("The button turns on when the sale starts."),
        "hint_login": _("Log in first, then come back to buy."),
        "hint_retry": _("You can try again in %(seconds)s s."),
        "sending": _("Sending your order…"),
        "queued": _("You got it! Creating your order…"),
        "got_it": _("You got it! Pay within %(time)s."),
        "pay": _("Pay now"),
        "cancel": _("Cancel order"),
        "paid": _("Paid. Thank you!"),
        "cancelled": _("Your order is cancelled; the item went back on sale."),
        "expired": _("The time to pay has run out; the order was cancelled."),
        "failed": _("Sorry, we could not confirm your order."),
        "outcome_unknown": _("The shop lost track of your purchase for a moment: checking whether it went through…"),
        "not_taken": _("Your purchase did not go through. You can try again."),
        "duplicate": _("You have already taken part in this sale."),
        "sold_out": _("Sold out: every unit has found a buyer."),
        "sold_out_short": _("Sold out"),
        "hint_sold_out": _("Units may come back if an order is cancelled; this page shows it."),
        "left": pgettext("units on the activity page", "%(n)s left"),
        "rate_limited": _("Too many tries. Please wait a moment, then try again."),
        "not_eligible": _("Sorry, your account is not eligible for this sale."),
        "blacklisted": _("Sorry, your account cannot take part in this sale."),
        "captcha_prompt": _("Answer the security question to confirm your purchase."),
        "captcha_required": _("This sale asks for a security check: answer the question to buy."),
        "captcha_invalid": _("That answer was wrong or has expired. Please answer this new question."),
        "not_started": _("The sale has not started yet."),
        "bad_token": _("The page was out of date; please try again."),
        "busy": _("The sale is very busy. Please try again in a moment."),
        "login": _("Please log in to buy."),
        "network": _("Could not reach the shop. Check your connection and try again."),
        "session": _("Your session has expired. Please reload the page."),
        "error": _("Something went wrong. Please try again."),
        "hello": _("Signed in as %(name)s"),
        "log_in": _("Log in"),
        "log_out": _("Log out"),
        "sign_up": _("Sign up"),
        "my_orders": _("My orders"),
    }


# _page_inputs(...) -> the page; no expiry (a change is a new key): the oldest go first.
def rendered_pages(name: str) -> ProcessMemory[tuple, RenderedPage]:
    """A memory of rendered pages, bounded by their bytes as well as their number."""
    return ProcessMemory(
        name,
        max_entries=256,
        max_bytes=16 * 1024 * 1024,
        size_of=lambda inputs, page: shallow_size(inputs, page) + len(getattr(page, "body", b"")),
    )


_rendered = rendered_pages("seckill.sale.pages.rendered")


def _page_inputs(activity: Activity, language: str) -> tuple:
    """Everything the page is made of: a change to any of these is a new page."""
    product = activity.product
    return (
        language,
        activity.pk,
        activity.title,
        activity.seckill_price,
        activity.start_at,
        activity.end_at,
        activity.total_stock,
        activity.per_user_limit,
        activity.captcha_required,
        activity.updated_at,
        product.pk,
        product.name,
        product.description,
        product.image_url,
        product.list_price,
        product.created_at,
    )


def activity_page_render(*, activity: Activity, language: str) -> RenderedPage:
    """The page, from this process's memory when nothing it is made of has changed
    (a render costs several times the query that fetches the activity)."""
    key = _page_inputs(activity, language)
    page = _rendered.get(key)
    if page is None:
        page = _activity_page_render_now(activity=activity, language=language)
        _rendered.put(key, page)
    return page


def _activity_page_render_now(*, activity: Activity, language: str) -> RenderedPage:
    return shared_page_render(
        template="seckill/activity_page.html",
        activity=activity,
        language=language,
        path_of=activity_page_path,
        strings=page_strings,
    )


def shared_page_render(
    *,
    template: str,
    activity: Activity,
    language: str,
    path_of: Callable[..., str],
    strings: Callable[[], dict],
) -> RenderedPage:
    """A page that is the same for every visitor, rendered without a request (no session,
    no user, no CSRF token can reach the bytes), with its language alternates
    (``path_of(activity_id=, language=)``), ETag and Last-Modified. ``strings`` is called
    in the page's language: the script's texts are translated then."""
    alternates = [
        {"code": code, "name": name, "path": path_of(activity_id=activity.pk, language=code)}
        for code, name in settings.LANGUAGES
    ]
    with translation.override(language):
        body = render_to_string(
            template,
            {
                "activity": activity,
                "product": activity.product,
                "alternates": alternates,
                "page_language": language,
                "language_cookie": settings.LANGUAGE_COOKIE_NAME,
                "csrf_cookie": settings.CSRF_COOKIE_NAME,  # the switch's POST (static/seckill/shop.js)
                "default_language": settings.LANGUAGE_CODE,
                "strings": strings(),
            },
        ).encode()
    return RenderedPage(
        body=body,
        etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"',
        last_modified=max(activity.updated_at, activity.product.created_at),
        language=language,
    )


def activity_page_publish(*, activity_id: int, directory: Path | None = None) -> list[Path]:
    """Write the page in every language under the publish directory, at the same paths
    as the URLs (``seckill/<id>/index.html``, ``zh-hans/seckill/<id>/index.html``)."""
    root = Path(directory or settings.SECKILL_PUBLISH_DIR)
    activity = Activity.objects.select_related("product").get(pk=activity_id)
    written = []
    for language in page_languages():
        page = activity_page_render(activity=activity, language=language)
        target = root / activity_page_path(activity_id=activity_id, language=language).strip("/") / "index.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".html.tmp")
        tmp.write_bytes(page.body)
        tmp.replace(target)  # a CDN origin never serves a half-written file
        written.append(target)
    return written
