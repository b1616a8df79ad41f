"""One clock on the shopper pages (core.clock): ``{{ t|shop_time }}`` the date and the time,
``{{ t|shop_time:"time" }}`` the time alone, in the shop's zone, 24-hour, labelled."""

from django import template

from core import clock

register = template.Library()


@register.filter
def shop_time(value, parts: str = "datetime") -> str:
    return clock.shop_time(value, date=parts != "time")
