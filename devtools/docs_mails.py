"""The shopper's mails as a shopper reads them, for the docs: the generated page
docs/reference/mails.md (written by devtools/docs_reference.py) and the mail screenshots of
devtools/screenshots.py.

Each mail is made by the shop's own code from templates/emails/, in each language:
orders.mails.order_mail for a sample order never saved, and the password reset form the
reset page uses. Each goes through accounts.mail.mail_send to Django's in-memory mail
backend, so the page shows the message as sent. Needs Django set up; no database.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

# The sample shop of the page, applied with the build's placeholders (docs_reference.main).
SAMPLE_ENVIRONMENT = {
    "PAYMENT_HOST": "shop.example.com",
    "PAYMENT_USES_SSL": "true",
    "DJANGO_DEFAULT_FROM_EMAIL": "shop@example.com",
    "DJANGO_TIME_ZONE": "Asia/Shanghai",
}
IN_MEMORY_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
ORDER_CREATED = datetime(2026, 12, 6, 12, 0, 3, tzinfo=UTC)
# The mails docs/screenshots/ shows as a mail reader does: (kind, language).
SCREENSHOTS = (("won", "en"), ("won", "zh-hans"))


@dataclass(frozen=True)
class Kind:
    name: str  # orders.mails.KINDS, or password_reset
    heading: str
    when: str

    @property
    def template(self) -> str:
        """Its templates' name in templates/emails/ (``<template>.txt``, ``<template>_subject.txt``)."""
        return self.name if self.name == "password_reset" else f"order_{self.name}"


def kinds() -> tuple[Kind, ...]:
    from django.conf import settings

    share = settings.ORDER_MAIL_REMINDER_SHARE
    window = settings.SECKILL_DEFAULT_PAY_TIMEOUT
    return (
        Kind(
            "won",
            "The win",
            "Sent after the order is created, once the transaction that wrote it commits.",
        ),
        Kind(
            "reminder",
            "The reminder",
            f"Sent once to an unpaid order when `ORDER_MAIL_REMINDER_SHARE` ({share:g}) of its pay window is left: "
            f"{_duration(window * share)} before the deadline of a {_duration(window)} window.",
        ),
        Kind(
            "cancelled",
            "The cancellation",
            "Sent after the order is cancelled: its deadline passed unpaid (this sample), "
            "the shopper cancelled it, or staff did.",
        ),
        Kind("paid", "The receipt", "Sent after the payment is confirmed and the order is paid."),
        Kind(
            "password_reset",
            "The password reset",
            "Sent when a registered address is given on the reset page (`/accounts/password_reset/`), "
            "in that page's language.",
        ),
    )


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return " ".join(part for part in (f"{minutes} min" if minutes else "", f"{rest} s" if rest else "") if part)


def sample_order(*, kind: str, language: str):
    """A shopper's order in the state its ``kind`` mail is sent in; nothing saved."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from accounts.models import AccountProfile
    from orders.models import Order
    from orders.services.creation import order_number
    from orders.services.lifecycle import CANCEL_TIMEOUT
    from seckill.models import Activity
    from stock.scripts import LogEntry

    shopper = get_user_model()(pk=7, username="alice", email="alice@example.com")
    AccountProfile(user=shopper, language=language)  # the language her mails are written in
    seconds = settings.SECKILL_DEFAULT_PAY_TIMEOUT
    sale = Activity(pk=1, title="Demo mug for a dime", seckill_price=Decimal("0.10"), pay_timeout=seconds)
    entry = LogEntry(f"{int(ORDER_CREATED.timestamp() * 1000)}-0", shopper.pk, 1, 0)
    order = Order(
        pk=1,
        order_no=order_number(activity_id=sale.pk, entry=entry),
        activity=sale,
        user=shopper,
        quantity=1,
        amount=sale.seckill_price,
        created_at=ORDER_CREATED,
        pay_deadline=ORDER_CREATED + timedelta(seconds=seconds),
    )
    if kind == "paid":
        order.status, order.paid_at = Order.Status.PAID, ORDER_CREATED + timedelta(minutes=3, seconds=12)
    elif kind == "cancelled":
        order.status, order.cancel_reason, order.cancelled_at = (
            Order.Status.CANCELLED,
            CANCEL_TIMEOUT,
            order.pay_deadline,
        )
    return order


def _sent(send: Callable[[], None]):
    """The one message ``send`` hands to Django's mail, caught by the in-memory backend."""
    from django.core import mail
    from django.test import override_settings

    with override_settings(EMAIL_BACKEND=IN_MEMORY_BACKEND):
        before = len(getattr(mail, "outbox", []))
        send()
        sent = mail.outbox[before:]
    if len(sent) != 1:
        raise RuntimeError(f"expected one mail, {len(sent)} were sent")
    return sent[0]


def _password_reset(*, shopper, language: str) -> None:
    """The reset page's form and templates (accounts.views.password_reset), its Celery task
    run in this process; the sample shopper is the one the address finds."""
    from django.conf import settings
    from django.utils import translation

    from accounts.forms import QueuedPasswordResetForm
    from accounts.views import password_reset
    from config.celery_app import app

    options = password_reset.view_initkwargs  # type: ignore[attr-defined]
    if options["form_class"] is not QueuedPasswordResetForm:
        raise RuntimeError(f"the reset page's form is {options['form_class']!r} now: show that one")

    class SampleShopperReset(QueuedPasswordResetForm):
        def get_users(self, email):
            return [shopper]

    form = SampleShopperReset(data={"email": shopper.email})
    if not form.is_valid():
        raise RuntimeError(f"the reset form refused the sample address: {form.errors}")
    eager = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        with translation.override(language):  # the reset page's language
            form.save(
                # The page's host and scheme: the shop's public origin in production.
                domain_override=settings.PAYMENT_HOST,
                use_https=settings.PAYMENT_USES_SSL,
                subject_template_name=options["subject_template_name"],
                email_template_name=options["email_template_name"],
            )
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = eager


def mail_message(*, kind: str, language: str):
    """The ``kind`` mail in ``language`` as Django's mail sends it (an EmailMessage)."""
    from accounts.mail import mail_send
    from orders.mails import order_mail

    order = sample_order(kind=kind, language=language)
    if kind == "password_reset":
        return _sent(lambda: _password_reset(shopper=order.user, language=language))
    return _sent(lambda: mail_send(order_mail(order=order, kind=kind)))


def mail_text(message) -> str:
    """The message as a mail program shows a plain-text mail: its headers, then the body."""
    headers = f"From: {message.from_email}\nTo: {', '.join(message.to)}\nSubject: {message.subject}"
    return f"{headers}\n\n{message.body.strip()}"


def mails_page() -> str:
    from django.conf import settings

    lines = [
        "# The shopper's mails",
        "",
        "<!-- Generated by devtools/docs_reference.py with devtools/docs_mails.py, from templates/emails/. -->",
        "",
        "Generated at build time: each mail below is rendered by the shop's own code from `templates/emails/`.",
        "The order mails come from `orders.mails.order_mail`, for a sample order that is never saved.",
        "The password reset comes from the reset page's form (`accounts.forms.QueuedPasswordResetForm`).",
        "Each is plain text, shown as a mail program shows it, in every language of the shop.",
        "A shopper gets the order mails in the language of the pages they last logged in from.",
        "The host, the sender and the zone are this sample's: `PAYMENT_HOST`, `DJANGO_DEFAULT_FROM_EMAIL`, "
        "`DJANGO_TIME_ZONE`.",
        "How the mails are sent is in [the shopper's pages](../SHOPPER.md#mails).",
        "",
    ]
    headings = {kind.name: kind.heading for kind in kinds()}
    for name, language in SCREENSHOTS:
        alt = f"{headings[name]} in {dict(settings.LANGUAGES)[language]}, as a mail reader shows it"
        lines += [f"![{alt}](../screenshots/{screenshot_name(name, language)})", ""]
    for kind in kinds():
        lines += [f"## {kind.heading}", "", kind.when, ""]
        for language, name in settings.LANGUAGES:
            text = mail_text(mail_message(kind=kind.name, language=language))
            lines += [f"**{name}**", "", "```text", text, "```", ""]
    return "\n".join(lines)


def screenshot_name(kind: str, language: str) -> str:
    return f"mail-{kind}-{language}.png"


def mail_screen(message, *, language: str) -> str:
    """A page showing ``message`` as a mail reader shows plain text: the headers, then the
    body in a monospace block."""
    rows = "".join(
        f"<dt>{label}</dt><dd>{html.escape(value)}</dd>"
        for label, value in (("From", message.from_email), ("To", ", ".join(message.to)), ("Subject", message.subject))
    )
    return f"""<!doctype html>
<html lang="{language}"><head><meta charset="utf-8"><title>{html.escape(message.subject)}</title>
<style>
body {{ margin: 0; font: 15px/1.45 "DejaVu Sans", "WenQuanYi Zen Hei", sans-serif; }}
.reader {{ display: inline-block; padding: 16px; background: #e9ecf1; }}
.mail {{ width: 760px; background: #fff; border: 1px solid #c9ced6; border-radius: 6px; }}
dl {{ display: grid; grid-template-columns: max-content 1fr; gap: 4px 12px; margin: 0; padding: 14px 18px;
      border-bottom: 1px solid #dde1e7; }}
dt {{ color: #5a6270; }} dd {{ margin: 0; }}
pre {{ margin: 0; padding: 16px 18px; white-space: pre-wrap;
       font: 14px/1.55 "DejaVu Sans Mono", "WenQuanYi Zen Hei Mono", monospace; }}
</style></head>
<body><div class="reader"><div class="mail"><dl>{rows}</dl><pre>{html.escape(message.body.strip())}</pre></div></div>
</body></html>
"""


def mail_screens() -> dict[str, str]:
    """Each screenshot's file name and the page to shoot."""
    return {
        screenshot_name(kind, language): mail_screen(mail_message(kind=kind, language=language), language=language)
        for kind, language in SCREENSHOTS
    }
