"""The sale's routes: its JSON API (mounted under /api/) and its pages."""

import re

from django.conf import settings
from django.urls import path, register_converter

from seckill.purchase import apis
from seckill.room import apis as room_apis
from seckill.room import views as room_views
from seckill.sale import apis as sale_apis
from seckill.sale import views

# The purchase first: the flood's endpoint is found without trying the others' patterns.
api_urlpatterns = [
    path("activities/<int:activity_id>/purchase", apis.purchase, name="activity-purchase"),
    path("activities/", sale_apis.ActivityListApi.as_view(), name="activity-list"),
    path("activities/<int:activity_id>/", sale_apis.ActivityDetailApi.as_view(), name="activity-detail"),
    path("activities/<int:activity_id>/flag", sale_apis.FlagApi.as_view(), name="activity-flag"),
    path("activities/<int:activity_id>/result", apis.ResultApi.as_view(), name="activity-result"),
    path("activities/<int:activity_id>/captcha", apis.CaptchaApi.as_view(), name="activity-captcha"),
    path("me", views.me, name="me"),
    path("activities/<int:activity_id>/room", room_apis.room_status_view, name="room-status"),
    path("activities/<int:activity_id>/room/join", room_apis.RoomJoinApi.as_view(), name="room-join"),
    path("activities/<int:activity_id>/room/me", room_apis.RoomStandingApi.as_view(), name="room-standing"),
    path("activities/<int:activity_id>/room/ticket", room_apis.RoomTicketApi.as_view(), name="room-ticket"),
    path("activities/<int:activity_id>/room/draw", room_apis.RoomDrawApi.as_view(), name="room-draw"),
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

# The pages that are the same bytes for every visitor: the language is in their own path
# (pagelang), never a visitor's choice; outside the language prefixes of config/urls.py.
shared_urlpatterns = [
    path("seckill/<int:activity_id>/", views.activity_page, name="activity-page"),
    path("<pagelang:language>/seckill/<int:activity_id>/", views.activity_page, name="activity-page-lang"),
    path("seckill/<int:activity_id>/flag.js", views.flag_js, name="activity-flag-js"),
    path("seckill/<int:activity_id>/room/", room_views.room_page, name="room-page"),
    path("<pagelang:language>/seckill/<int:activity_id>/room/", room_views.room_page, name="room-page-lang"),
]

# The pages made for the visitor: under the language prefix (config/urls.py's i18n_patterns).
urlpatterns = [
    path("", views.activity_list, name="home"),
    path("products/", views.product_list, name="product-list"),
    path("products/<int:product_id>/", views.product_detail, name="product-detail"),
]
