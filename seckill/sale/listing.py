"""The sale lists (`/api/activities/` and `/`): upcoming and live sales first, newest
first, then the ended ones; a page at a time, each page built once per
``SECKILL_LIST_CACHE_TTL`` in this process, with one stock read per listed activity
(``seckill.sale.selectors.units_left_many``): the units still for sale, the reserve's included."""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Case, IntegerField, Q, Value, When
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from core.memory import MISSING, ProcessMemory
from seckill.models import Activity
from seckill.sale.selectors import units_left_many

logger = logging.getLogger(__name__)

LIST_PAGE_SIZE = 20

_pages: ProcessMemory[tuple[int, int], "ActivityPage"] = ProcessMemory("activity-list-pages", max_entries=256)


@dataclass(frozen=True)
class ActivityPage:
    number: int
    count: int  # activities in the whole list
    activities: list[Activity]
    remaining: dict[int, int | None]

    @property
    def pages(self) -> int:
        return max(1, -(-self.count // LIST_PAGE_SIZE))

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def has_previous(self) -> bool:
        return self.number > 1


SOLD_OUT = "sold_out"


def card_state(*, phase: str, remaining: int | None) -> tuple[str, str]:
    """The badge a listed sale wears, (css name, label): its phase, or "sold out" while
    it is live with nothing left (the units for sale, the reserve's included: the same
    fact as a ``sold_out`` answer). Units that come back (a cancelled order) make it
    "live" again."""
    if phase == Activity.Phase.LIVE and remaining is not None and remaining <= 0:
        return SOLD_OUT, str(_("sold out"))
    return phase, str(Activity.Phase(phase).label)


class PageNotFound(Exception):
    """A page number past the last page (or not a positive integer)."""


def page_number_parse(value: str | None) -> int:
    if value in (None, ""):
        return 1
    if not value.isdigit() or int(value) < 1:
        raise PageNotFound(value)
    return int(value)


def activities_ordered():
    """Upcoming and live first, then ended (by the database's clock), each newest first."""
    ended = Q(status=Activity.Status.ENDED) | Q(end_at__lte=Now())
    return (
        Activity.objects.select_related("product")
        .annotate(list_rank=Case(When(ended, then=Value(1)), default=Value(0), output_field=IntegerField()))
        .order_by("list_rank", "-start_at", "-id")
    )


def activities_page(*, number: int) -> ActivityPage:
    """One page of the list; PageNotFound past the last one."""
    ttl = settings.SECKILL_LIST_CACHE_TTL
    key = (number, LIST_PAGE_SIZE)
    page = _pages.get(key, MISSING) if ttl > 0 else MISSING
    if page is MISSING:
        page = _page_build(number)
        if ttl > 0:
            _pages.put(key, page, ttl=ttl)
    if number > page.pages:
        raise PageNotFound(number)
    return page


def _page_build(number: int) -> ActivityPage:
    count = Activity.objects.count()
    start = (number - 1) * LIST_PAGE_SIZE
    activities = list(activities_ordered()[start : start + LIST_PAGE_SIZE]) if start < count else []
    return ActivityPage(
        number=number, count=count, activities=activities, remaining=units_left_many([a.pk for a in activities])
    )
