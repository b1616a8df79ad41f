"""The sale list's filters."""

from django.contrib import admin
from django.db.models import Q
from django.utils import timezone

from seckill.admin.dashboard import SaleStatus
from seckill.models import Activity


class SaleStatusFilter(admin.SimpleListFilter):
    """The lifecycle in the status badge's words (sold out is a live sale with nothing left:
    the database alone cannot tell it, so it is listed under "live")."""

    title = "status"
    parameter_name = "sale"

    def lookups(self, request, model_admin):
        return [
            (SaleStatus.SCHEDULED, "scheduled"),
            (SaleStatus.WARMING, "ready to open"),
            (SaleStatus.LIVE, "live or sold out"),
            (SaleStatus.ENDED, "ended"),
        ]

    def queryset(self, request, queryset):
        now = timezone.now()
        upcoming = Q(start_at__gt=now) & ~Q(status=Activity.Status.ENDED)
        ended = Q(status=Activity.Status.ENDED) | Q(end_at__lte=now)
        match self.value():
            case SaleStatus.SCHEDULED:
                return queryset.filter(upcoming, status=Activity.Status.SCHEDULED)
            case SaleStatus.WARMING:
                return queryset.filter(upcoming, status=Activity.Status.WARMED)
            case SaleStatus.LIVE:
                return queryset.filter(start_at__lte=now).exclude(ended)
            case SaleStatus.ENDED:
                return queryset.filter(ended)
        return queryset
