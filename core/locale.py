"""The language of a page: its URL's prefix (/zh-hans/orders/), else the visitor's choice."""

from django.middleware.locale import LocaleMiddleware
from django.utils import translation


class PathOrVisitorLocaleMiddleware(LocaleMiddleware):
    """Django's LocaleMiddleware for i18n_patterns(prefix_default_language=False), with one
    change: a URL without a prefix is the default language's URL for resolving it, then the
    page answers in the visitor's choice (the language switch's cookie, else the browser's
    Accept-Language), as every page did before the prefixes. Django's own middleware would
    answer it in the default language whatever the visitor asked for. A prefixed URL is in
    its language, whoever asks: a link to /zh-hans/orders/ opens in Chinese."""

    def process_view(self, request, view_func, view_args, view_kwargs):
        if translation.get_language_from_path(request.path_info) is None:
            translation.activate(translation.get_language_from_request(request))
            request.LANGUAGE_CODE = translation.get_language()
        return None
