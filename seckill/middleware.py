"""Keeps a page that is the same for every visitor free of per-visitor headers."""

import logging

from django.utils.cache import cc_delim_re  # type: ignore[attr-defined]  # missing from django-stubs

logger = logging.getLogger(__name__)

SHARED_PAGE_ATTR = "shared_page"
# What the inner middleware add on every response: LocaleMiddleware always says
# "Vary: Accept-Language", SessionMiddleware "Vary: Cookie" once anything reads the session.
PER_VISITOR_VARY = {"cookie", "accept-language"}


def mark_shared(response):
    """Declare a response identical for every visitor (see seckill.sale.views.shared_page)."""
    setattr(response, SHARED_PAGE_ATTR, True)
    return response


class SharedPageMiddleware:
    """Outermost middleware. For a response its view declared shared (rendered from the
    activity alone, its language fixed by the URL), the request's cookies and language
    did not shape the bytes, so ``Vary: Cookie`` / ``Vary: Accept-Language`` would only
    split a CDN's cache per visitor; they are removed. A shared page must never set a
    cookie: if something inner tried (a CSRF cookie of an old format being rotated), the
    cookie is dropped, since a CDN would hand it to everyone."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not getattr(response, SHARED_PAGE_ATTR, False):
            return response
        if response.has_header("Vary"):
            kept = [v for v in cc_delim_re.split(response["Vary"]) if v and v.lower() not in PER_VISITOR_VARY]
            if kept:
                response["Vary"] = ", ".join(kept)
            else:
                del response["Vary"]
        response.cookies.clear()
        return response


class DatabaseAwayMiddleware:
    """A page whose view needs the database while it is unreachable answers 503 with
    ``Retry-After``, never a 500 (the JSON API maps the same errors itself:
    ``core.errors.api_error_of``). Django hands it the view's and the template's
    exceptions; any other exception still reaches Django's 500 handling."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        from django.http import HttpResponse

        from core.errors import DATABASE_AWAY, busy

        if not isinstance(exception, DATABASE_AWAY):
            return None
        logger.warning("page %s: the database is away: %s", request.path, exception)
        away = busy()  # the API's answer in this case, as a page
        response = HttpResponse(
            "The shop is busy just now; please try again in a moment.\n",
            status=away.status,
            content_type="text/plain; charset=utf-8",
        )
        for name, value in away.headers().items():
            response[name] = value
        return response
