"""The language switch of the shopper pages: this page's URL in another language."""

from django import template
from django.urls import translate_url

register = template.Library()


@register.simple_tag(takes_context=True)
def this_page_in(context, language: str) -> str:
    """/zh-hans/orders/ in English is /orders/ (i18n_patterns). Resolved while the page's own
    language is active, which set_language, answering another request, cannot do."""
    request = context.get("request")
    return translate_url(request.get_full_path() if request else "/", language)
