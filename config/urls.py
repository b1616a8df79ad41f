import re

from csp.decorators import csp_update
from django.conf import settings
from django.contrib import admin
from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from config import health
from config.ping import ping
from orders import apis as order_apis
from orders import views as order_views
from seckill import apis as seckill_apis
from seckill import views as seckill_views

SWAGGER_CDN = "https://cdn.jsdelivr.net"

api = [
    path("ping", ping, name="ping"),
    path("activities/<int:activity_id>/purchase", seckill_apis.PurchaseApi.as_view(), name="activity-purchase"),
    path("activities/", seckill_apis.ActivityListApi.as_view(), name="activity-list"),
    path("activities/<int:activity_id>/", seckill_apis.ActivityDetailApi.as_view(), name="activity-detail"),
    path("activities/<int:activity_id>/flag", seckill_apis.FlagApi.as_view(), name="activity-flag"),
    path("activities/<int:activity_id>/result", seckill_apis.ResultApi.as_view(), name="activity-result"),
    path("activities/<int:activity_id>/captcha", seckill_apis.CaptchaApi.as_view(), name="activity-captcha"),
    path("orders/", order_apis.OrderListApi.as_view(), name="order-list"),
    path("orders/<str:order_no>/", order_apis.OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<str:order_no>/pay", order_apis.OrderPayApi.as_view(), name="order-pay"),
    path("orders/<str:order_no>/cancel", order_apis.OrderCancelApi.as_view(), name="order-cancel"),
    path("me", seckill_views.me, name="me"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI comes from its CDN, and its set-up script as a file (the split view): the
    # Content Security Policy is widened for this page alone.
    path(
        "docs/",
        csp_update({"script-src": [SWAGGER_CDN], "style-src": [SWAGGER_CDN], "img-src": [SWAGGER_CDN]})(
            SpectacularSwaggerSplitView.as_view(url_name="schema")
        ),
        name="api-docs",
    ),
]


class PageLanguageConverter:
    """A non-default language of the activity page, in its URL (/zh-hans/seckill/1/): the
    page's language comes from the path, never from the request's headers, so one URL is
    one set of bytes for every visitor. The default language has no prefix."""

    regex = "|".join(re.escape(code) for code, _ in settings.LANGUAGES if code != settings.LANGUAGE_CODE)

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(PageLanguageConverter, "pagelang")

urlpatterns = [
    # First: the flood's endpoints are found without trying every page's pattern.
    path("api/", include(api)),
    path("", seckill_views.activity_list, name="home"),
    path("seckill/<int:activity_id>/", seckill_views.activity_page, name="activity-page"),
    path("<pagelang:language>/seckill/<int:activity_id>/", seckill_views.activity_page, name="activity-page-lang"),
    path("seckill/<int:activity_id>/flag.js", seckill_views.flag_js, name="activity-flag-js"),
    path("products/", seckill_views.product_list, name="product-list"),
    path("products/<int:product_id>/", seckill_views.product_detail, name="product-detail"),
    path("orders/", order_views.my_orders, name="my-orders"),
    path("orders/<str:order_no>/pay/", order_views.order_pay_start, name="order-pay-page"),
    path("orders/<str:order_no>/cancel/", order_views.order_cancel_view, name="order-cancel-page"),
    path("gateway/checkout/", order_views.gateway_checkout, name="gateway-checkout"),
    path("payments/callback/", order_views.payment_callback, name="payment-callback"),
    path("accounts/signup/", seckill_views.signup, name="signup"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path(settings.ADMIN_URL, admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", health.metrics, name="metrics"),
]

if settings.SECKILL_BENCH_VIEWS:
    # Bench-only endpoints (the database-direct purchase for contrast); off unless asked for.
    urlpatterns.append(path("api/bench/", include("bench.urls")))
