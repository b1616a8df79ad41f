"""Server-rendered shopper pages: the sale list, the CDN-cacheable activity page and its
flag script, the catalog, and the small uncached call the page script makes."""

import functools
import json

from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from django.utils.http import http_date
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from core.api_errors import ErrorSerializer
from inventory.models import Product
from seckill.middleware import mark_shared
from seckill.models import Activity
from seckill.sale.listing import PageNotFound, activities_page, card_state, page_number_parse
from seckill.sale.pages import activity_page_render, page_flag
from seckill.sale.snapshot import activity_snapshot

NO_STORE = "no-store, max-age=0"


def activity_list(request):
    """Upcoming and live sales first, newest first, then the ended ones; ``?page=N``."""
    try:
        page = activities_page(number=page_number_parse(request.GET.get("page")))
    except PageNotFound as exc:
        raise Http404("No such page.") from exc
    rows = []
    for a in page.activities:
        left = page.remaining.get(a.pk)
        rows.append((a, left, *card_state(phase=a.phase, remaining=left)))
    return render(request, "seckill/activity_list.html", {"rows": rows, "page": page, "now": timezone.now()})


def shared_page(view):
    """A page that is the same for every visitor: public cache headers, validators with
    304 on a conditional GET, no cookie and no per-visitor Vary (SharedPageMiddleware).

    The view returns a RenderedPage; it must not read the session, the user or the
    CSRF token, which is why it gets no chance to: it renders without the request.
    """

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method not in ("GET", "HEAD"):
            return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
        page = view(request, *args, **kwargs)
        response = HttpResponse(page.body, content_type="text/html; charset=utf-8")
        response["ETag"] = page.etag
        response["Last-Modified"] = http_date(page.last_modified.timestamp())
        response["Content-Language"] = page.language
        patch_cache_control(
            response, public=True, max_age=settings.SECKILL_PAGE_MAX_AGE, s_maxage=settings.SECKILL_PAGE_S_MAXAGE
        )
        conditional = get_conditional_response(
            request, etag=page.etag, last_modified=int(page.last_modified.timestamp()), response=response
        )
        return mark_shared(conditional)

    return wrapper


@shared_page
def activity_page(request, activity_id: int, language: str | None = None):
    activity = Activity.objects.select_related("product").filter(pk=activity_id).first()
    if activity is None:
        raise Http404("No such activity.")
    return activity_page_render(activity=activity, language=language or settings.LANGUAGE_CODE)


@never_cache
def flag_js(request, activity_id: int):
    """The flag as a script, for `<script src="flag.js?v=<random>">`: never cached."""
    snapshot = activity_snapshot(activity_id)
    if snapshot is None:
        raise Http404("No such activity.")
    flag = json.dumps(page_flag(activity=snapshot, now=timezone.now()), cls=DjangoJSONEncoder)
    body = f"window.seckillFlag = {flag};\nif (window.seckillOnFlag) window.seckillOnFlag(window.seckillFlag);\n"
    response = HttpResponse(body, content_type="application/javascript; charset=utf-8")
    response["Cache-Control"] = NO_STORE
    return response


FAVICON_MAX_AGE = 7 * 24 * 3600


@functools.cache
def _favicon() -> bytes:
    path = finders.find("seckill/favicon.ico")
    if not path:
        raise Http404("No icon.")
    with open(path, "rb") as f:
        return f.read()


def favicon(request):
    """/favicon.ico, which browsers ask for on every site whatever the page says: the same
    bytes for everyone, cached for a week."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    response = HttpResponse(_favicon(), content_type="image/x-icon")
    patch_cache_control(response, public=True, max_age=FAVICON_MAX_AGE)
    return mark_shared(response)


@extend_schema(
    summary="Who is logged in, and a CSRF token for the page's calls",
    responses={
        200: inline_serializer(
            "Me",
            {
                "authenticated": serializers.BooleanField(),
                "username": serializers.CharField(allow_null=True),
                "csrf_token": serializers.CharField(),
            },
        ),
        401: OpenApiResponse(ErrorSerializer, description="an Authorization header that names no shopper"),
        503: OpenApiResponse(ErrorSerializer, description="the database is away"),
    },
)
@api_view(["GET"])
@permission_classes([AllowAny])
def me(request):
    """What the cached page cannot carry: who is logged in, and a CSRF token (the
    cookie is set too) for the purchase, pay and cancel calls. DRF authenticates, as for
    every API call: a session, or an API token (a token that is none is a 401)."""
    user = request.user
    response = Response(
        {
            "authenticated": user.is_authenticated,
            "username": user.get_username() if user.is_authenticated else None,
            "csrf_token": get_token(request._request),
        }
    )
    response["Cache-Control"] = NO_STORE
    patch_vary_headers(response, ["Cookie"])
    return response


def product_list(request):
    products = Product.objects.order_by("name")[:200]
    return render(request, "catalog/product_list.html", {"products": products})


def product_detail(request, product_id: int):
    product = get_object_or_404(Product, pk=product_id)
    activities = list(product.activities.order_by("-start_at")[:20])
    return render(
        request, "catalog/product_detail.html", {"product": product, "activities": activities, "now": timezone.now()}
    )
