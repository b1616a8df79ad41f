"""One clock for people: every time a person reads is in the shop's zone (settings.TIME_ZONE),
24-hour, labelled with the zone's name ("2026-12-06 15:14:01 Asia/Shanghai"). The shopper
pages' scripts write the same ("static/seckill/shop.js", Intl.DateTimeFormat with the page's
zone and hourCycle h23), so a time reads the same wherever it comes from."""

from datetime import datetime

from django.utils import timezone
from django.utils.functional import lazy
from django.utils.text import format_lazy


def shop_zone() -> str:
    """The shop's zone, as the label of every time shown ("Asia/Shanghai", "UTC")."""
    return timezone.get_current_timezone_name()


def zoned(text: str):
    """A heading for a column of times: "paid (Asia/Shanghai)" (lazy: read when shown)."""
    return format_lazy("{} ({})", text, lazy(shop_zone, str)())


def shop_time(value: datetime | str | None, *, date: bool = True, seconds: bool = True, label: bool = True) -> str:
    """``value`` (an aware datetime or an ISO 8601 string) in the shop's zone, 24-hour:
    "2026-12-06 15:14:01 Asia/Shanghai"; without the date, the seconds or the label if
    asked. Nothing (None, "") is an en dash."""
    if not value:
        return "–"
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return text
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    shown = local.strftime("%H:%M:%S" if seconds else "%H:%M")
    if date:
        shown = f"{local:%Y-%m-%d} {shown}"
    return f"{shown} {shop_zone()}" if label else shown
