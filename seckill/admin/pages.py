"""The sale's own admin pages (the live view and its JSON, the copy's POST) and the links
from the list and the change page to the pages of its orders and its report."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from orders.models import AnomalyOrder, Order, ReconciliationReport
from orders.selectors import sales_visible_to
from seckill.admin.actions import duplicate_and_tell
from seckill.admin.dashboard import live_figures
from seckill.models import Activity


class ActivityPagesMixin(admin.ModelAdmin):
    """The live view, the change page's links and its copy button, and who may follow which link."""

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:activity_id>/live/", view(self.live_view), name="seckill_activity_live"),
            path("<int:activity_id>/live.json", view(self.live_json), name="seckill_activity_live_json"),
            path("<int:activity_id>/duplicate/", view(self.duplicate_view), name="seckill_activity_duplicate"),
            *super().get_urls(),
        ]

    def _viewable(self, request, activity_id: int) -> Activity:
        """The sale, if this user may see it; another merchant's answers as a missing one (404)."""
        activity = get_object_or_404(
            sales_visible_to(user=request.user, sales=Activity).select_related("product"), pk=activity_id
        )
        if not self.has_view_permission(request, activity):
            raise PermissionDenied
        return activity

    def live_view(self, request, activity_id: int):
        activity = self._viewable(request, activity_id)
        allowed = self._allowed_links(request)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Live: {activity}",
            "activity": activity,
            "figures": live_figures(activity=activity),
            "json_url": reverse("admin:seckill_activity_live_json", args=[activity.pk]),
            "orders_url": orders_url(activity.pk) if allowed["orders"] else None,
            "report_url": reverse("admin:orders_reconciliationreport_activity", args=[activity.pk])
            if allowed["report"]
            else None,
            "anomalies_url": anomalies_url(activity.pk) if self._may_view(request, AnomalyOrder) else None,
            "opts": self.model._meta,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/seckill/activity/live.html", context)

    def live_json(self, request, activity_id: int):
        activity = self._viewable(request, activity_id)
        return JsonResponse(live_figures(activity=activity))  # admin_view: never cached

    def _may_view(self, request, model) -> bool:
        model_admin = self.admin_site._registry.get(model)
        return model_admin is not None and model_admin.has_view_permission(request)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = dict(extra_context or {})
        visible = sales_visible_to(user=request.user, sales=Activity)
        activity = visible.filter(pk=object_id).first() if str(object_id).isdigit() else None
        if activity is not None:
            allowed = self._allowed_links(request)
            extra["sale_links"] = [
                (reverse("admin:seckill_activity_live", args=[activity.pk]), "Live view"),
                *([(orders_url(activity.pk), "Orders")] if allowed["orders"] else []),
                *(
                    [(reverse("admin:orders_reconciliationreport_activity", args=[activity.pk]), "Report")]
                    if allowed["report"]
                    else []
                ),
            ]
            extra["can_duplicate"] = self.has_add_permission(request)
            extra["duplicate_url"] = reverse("admin:seckill_activity_duplicate", args=[activity.pk])
        return super().change_view(request, object_id, form_url, extra)

    def duplicate_view(self, request, activity_id: int):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        activity = self._viewable(request, activity_id)
        if not self.has_add_permission(request):
            raise PermissionDenied
        copy = duplicate_and_tell(self, request, activity)
        return HttpResponseRedirect(reverse("admin:seckill_activity_change", args=[copy.pk]))

    def _allowed_links(self, request) -> dict[str, bool]:
        """Which of the other pages this user may open: no link answers 403."""
        registry = self.admin_site._registry
        orders, reports = registry.get(Order), registry.get(ReconciliationReport)
        return {
            "orders": orders is not None and orders.has_view_permission(request),
            # The orders admin says who may read a sale's report (merchants too).
            "report": reports is not None
            and getattr(reports, "may_see_activity_report", reports.has_view_permission)(request),
        }


def orders_url(activity_id: int) -> str:
    """The sale's orders in the orders admin."""
    return f"{reverse('admin:orders_order_changelist')}?activity__id__exact={activity_id}"


def anomalies_url(activity_id: int) -> str:
    """The sale's open anomalies in the orders admin."""
    return f"{reverse('admin:orders_anomalyorder_changelist')}?activity__id__exact={activity_id}&status__exact=open"
