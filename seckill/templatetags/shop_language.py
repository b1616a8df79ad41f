"""The language switch of the shopper pages: this page's URL in another language."""

from django import template
from django.conf import settings
from django.urls import translate_url

register = template.Library()


@register.simple_tag(takes_context=True)
def this_page_in(context, language: str) -> str:
    """/zh-hans/orders/ in English is /orders/ (i18n_patterns). Resolved while the page's own
    language is active, which set_language, answering another request, cannot do."""
    request = context.get("request")
    return translate_url(request.get_full_path() if request else "/", language)


@register.simple_tag(takes_context=True)
def this_page_in_default_language(context) -> str:
    """This page's path without its language prefix: /zh-hans/accounts/login/ is /accounts/login/."""
    request = context.get("request")
    return translate_url(request.path, settings.LANGUAGE_CODE) if request else "/"
