from django import template

from orders.models import AnomalyOrder

register = template.Library()


@register.simple_tag(takes_context=True)
def open_anomalies(context) -> int | None:
    """Open anomalies for the admin header; None for those who may not view them."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_active or not user.has_perm("orders.view_anomalyorder"):
        return None
    return AnomalyOrder.objects.filter(status=AnomalyOrder.Status.OPEN).count()
