"""The waiting room's page: the same bytes for every visitor (it renders without the
request); the script asks /api/me, the room's status and the shopper's join for the rest."""

from django.conf import settings
from django.http import Http404
from django.urls import reverse
from django.utils.translation import gettext as _

from seckill.models import Activity
from seckill.sale.pages import RenderedPage, page_strings, rendered_pages, shared_page_render
from seckill.sale.views import shared_page


def room_page_path(*, activity_id: int, language: str) -> str:
    if language == settings.LANGUAGE_CODE:
        return reverse("room-page", args=[activity_id])
    return reverse("room-page-lang", kwargs={"language": language, "activity_id": activity_id})


def room_strings() -> dict[str, str]:
    """What the room's script says, in the active language (%(name)s filled in by the script)."""
    return {
        **page_strings(),
        "join": _("Join the queue"),
        "joining": _("Joining…"),
        "login_to_join": _("Log in to join the queue."),
        "not_open": _("The queue opens at %(time)s."),
        "pre_queue": _("You are in the queue. Places are drawn at random when the sale starts."),
        "drawing": _("The sale has started: drawing places…"),
        "place": _("Your place: %(place)s"),
        "ahead": _("Shoppers ahead of you: %(n)s"),
        "estimate": _("Estimated wait: %(time)s"),
        "estimate_unknown": _("Estimated wait: unknown while the queue is not moving"),
        "serving": _("Now serving: %(n)s"),
        "waiting_count": _("%(n)s waiting"),
        "paused": _("The queue is paused for a moment. You keep your place."),
        "admitted": _("It is your turn! Buy before %(time)s."),
        "admission_expired": _("Your turn has passed: the time to buy ran out."),
        "room_closed": _("Sold out: the queue is closed. If units come back, it opens again in order."),
        "seed_commitment": _("Draw commitment (SHA-256 of the seed): %(value)s"),
        "seed": _("Draw seed: %(value)s"),
        "ticket_used": _("You have already used your turn."),
        "bought_line": _("You got it!"),
        "bought": _("You got it! Your order is waiting for payment."),
        "bought_paid": _("You got it! Your order is paid."),
        "see_order": _("See order %(order)s"),
        "ticket_expired": _("Your turn has passed: the time to buy ran out."),
        "seconds": _("%(n)s s"),
        "minutes": _("%(n)s min"),
    }


_rendered = rendered_pages("seckill.room.views.rendered")


def room_page_render(*, activity: Activity, language: str) -> RenderedPage:
    product = activity.product
    key = (language, activity.pk, activity.updated_at, product.pk, product.name, product.list_price)
    page = _rendered.get(key)
    if page is None:
        page = shared_page_render(
            template="seckill/room.html",
            activity=activity,
            language=language,
            path_of=room_page_path,
            strings=room_strings,
        )
        _rendered.put(key, page)
    return page


@shared_page
def room_page(request, activity_id: int, language: str | None = None):
    activity = Activity.objects.select_related("product").filter(pk=activity_id).first()
    if activity is None or activity.admission_mode != Activity.AdmissionMode.ROOM:
        raise Http404("No waiting room for this sale.")
    return room_page_render(activity=activity, language=language or settings.LANGUAGE_CODE)
