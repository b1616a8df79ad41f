"""Template helpers of the shopper pages."""

from django import template
from django.conf import settings
from django.utils import translation

from seckill.sale.pages import activity_page_path, page_languages

register = template.Library()


@register.simple_tag
def activity_url(activity_id: int) -> str:
    """The activity page in the language of the page that links to it."""
    language = translation.get_language()
    if language not in page_languages():
        language = settings.LANGUAGE_CODE
    return activity_page_path(activity_id=activity_id, language=language)


@register.simple_tag
def html_lang() -> str:
    """BCP 47 for the lang attribute: Django's zh-hans is zh-Hans."""
    language = translation.get_language() or settings.LANGUAGE_CODE
    head, _, tail = language.partition("-")
    return f"{head}-{tail.title()}" if len(tail) == 4 else language
