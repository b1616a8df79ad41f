"""The shopper's mails about an order: the win (what, the amount, pay by when, a link),
the reminder before the payment deadline, the cancellation and the payment receipt.

The services enqueue them after the commit that changed the order (``order_mails_enqueue``,
one task for a batch of orders); ``order_mails_task`` renders each in the shopper's
language and sends it once (accounts.mail.mail_send_once), retried by Celery while the
mail server or the database is away. An order never waits for, nor depends on, its mail."""

import logging

from celery import shared_task
from django.conf import settings
from django.core.mail import get_connection
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import DateTimeField, DurationField, Exists, ExpressionWrapper, F, OuterRef, Value
from django.urls import reverse
from django.utils import timezone, translation

from accounts.mail import Mail, language_of, mail_render, mail_send_once, site_url
from accounts.models import SentMail
from accounts.tasks import MAIL_TASK_OPTIONS
from core.clock import shop_time

from .models import Order

logger = logging.getLogger(__name__)

KINDS = ("won", "reminder", "cancelled", "paid")
# A reminder is for an order still to pay; the others are sent whatever happened since.
_STATUS_NEEDED = {"reminder": Order.Status.PENDING}
REMINDER_BATCH = 200


def order_mails_enqueue(*, kind: str, order_ids: list[int]) -> None:
    """After the current transaction commits (now, outside one), enqueue the ``kind``
    mails of these orders. A broker away costs the mails, never the orders: logged."""
    if kind not in KINDS:
        raise ValueError(f"unknown order mail {kind!r}")
    if not order_ids:
        return

    def enqueue() -> None:
        try:
            order_mails_task.delay(kind, list(order_ids))
        except Exception as exc:  # any broker failure; the change itself is committed
            logger.warning("order mails (%s) of %d orders not enqueued: %s", kind, len(order_ids), exc)

    transaction.on_commit(enqueue, robust=True)


def order_mail(*, order: Order, kind: str) -> Mail:
    """The ``kind`` mail of ``order``, in its shopper's language; its link opens the page in
    that language too (/zh-hans/orders/…), on any device."""
    language = language_of(order.user)
    with translation.override(language):
        order_path = reverse("order-page", args=[order.order_no])
    context = {
        "order": order,
        "title": order.activity.title,
        "order_url": site_url(order_path),
        # The one clock for people (core.clock): the shop's zone, 24-hour, labelled.
        "pay_by": shop_time(order.pay_deadline),
        "paid_at": shop_time(order.paid_at),
    }
    return mail_render(template=f"order_{kind}", context=context, to=order.user.email, language=language)


@shared_task(**{**MAIL_TASK_OPTIONS, "autoretry_for": (OSError, OperationalError, InterfaceError)})
def order_mails_task(kind: str, order_ids: list[int]) -> int:
    """Send the ``kind`` mails of these orders; those sent already (a redelivery, a retry
    after a partial failure) are skipped. Returns how many went now."""
    orders = Order.objects.filter(pk__in=order_ids).exclude(user__email="")
    if kind in _STATUS_NEEDED:
        orders = orders.filter(status=_STATUS_NEEDED[kind])
    to_mail = list(orders.select_related("user__account_profile", "activity").order_by("pk"))
    if not to_mail:
        return 0  # no session opened for shoppers without an address
    sent = 0
    with get_connection() as connection:  # one SMTP session for the batch
        for order in to_mail:
            mail = order_mail(order=order, kind=kind)
            sent += mail_send_once(kind=f"order-{kind}", reference=order.order_no, mail=mail, connection=connection)
    return sent


def orders_due_a_reminder(*, now=None) -> list[int]:
    """Pending orders with at most ORDER_MAIL_REMINDER_SHARE of their pay window left
    and no reminder yet, soonest deadline first (a batch)."""
    share = settings.ORDER_MAIL_REMINDER_SHARE
    if share <= 0:
        return []
    now = now or timezone.now()
    window = ExpressionWrapper(F("pay_deadline") - F("created_at"), output_field=DurationField())
    reminded = SentMail.objects.filter(kind="order-reminder", reference=OuterRef("order_no"))
    due = (
        Order.objects.filter(status=Order.Status.PENDING, pay_deadline__gt=now)
        .annotate(window=window)
        .filter(pay_deadline__lte=ExpressionWrapper(Value(now) + F("window") * share, output_field=DateTimeField()))
        .exclude(user__email="")
        .exclude(Exists(reminded))
        .order_by("pay_deadline")
    )
    return list(due.values_list("pk", flat=True)[:REMINDER_BATCH])


@shared_task
def order_reminders_task() -> int:
    """Beat's: enqueue the reminders now due (one task per batch); each is sent once."""
    due = orders_due_a_reminder()
    if due:
        order_mails_task.delay("reminder", due)
    return len(due)
