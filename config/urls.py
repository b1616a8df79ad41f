from django.conf import settings
from django.conf.urls.i18n import i18n_patterns
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from accounts import views as account_views
from orders import urls as order_urls
from seckill import urls as seckill_urls
from seckill.sale.views import favicon
from server import health
from server.ping import ping

api = [
    path("ping", ping, name="ping"),
    *seckill_urls.api_urlpatterns,  # the purchase next: the flood's endpoint is found early
    *order_urls.api_urlpatterns,
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI and ReDoc from drf-spectacular-sidecar's static files (this origin), the
    # set-up script as a file (the split view): the site's Content Security Policy holds.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
]

urlpatterns = [
    # First: the flood's endpoints are found without trying every page's pattern.
    path("api/", include(api)),
    path("", include(seckill_urls.shared_urlpatterns)),
    path("", include(order_urls.provider_urlpatterns)),
    # Django's set_language, remembered for a signed-in shopper's mails.
    path("i18n/setlang/", account_views.language_switch, name="set_language"),
    path(settings.ADMIN_URL, admin.site.urls),
    path("favicon.ico", favicon, name="favicon"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", health.metrics, name="metrics"),
]
# The shopper's pages in every language, the account pages included: /orders/ in the
# visitor's language, /zh-hans/orders/ in Chinese for everyone (core.locale.PathOrVisitorLocaleMiddleware).
urlpatterns += i18n_patterns(
    path("", include(seckill_urls)),
    path("", include(order_urls)),
    path("accounts/", include("accounts.urls")),  # sign-up, the queued password reset
    path("accounts/", include("django.contrib.auth.urls")),
    prefix_default_language=False,
)

if settings.SECKILL_BENCH_VIEWS:
    # Bench-only endpoints (the database-direct purchase for contrast); off unless asked for.
    urlpatterns.append(path("api/bench/", include("bench.urls")))
