"""Mail to a shopper, through Django's mail API: rendered from templates/emails/ in the
shopper's language, sent at most once per (kind, reference). The sending itself runs in
Celery tasks (accounts.tasks, orders.mails), never on a request's path."""

from dataclasses import dataclass
from urllib.parse import urljoin

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import translation
from payments.core import get_base_url

from .models import AccountProfile, SentMail

LANGUAGE_CODES = frozenset(code for code, _name in settings.LANGUAGES)


@dataclass(frozen=True)
class Mail:
    subject: str
    body: str
    to: str


def language_remember(*, user, language: str) -> None:
    """Keep ``language`` as the one ``user``'s mails are written in (a known one only)."""
    if language in LANGUAGE_CODES:
        AccountProfile.objects.update_or_create(user=user, defaults={"language": language})


def language_of(user) -> str:
    """The language of ``user``'s mails (its profile read with the user when selected so)."""
    try:
        return user.account_profile.language
    except AccountProfile.DoesNotExist:
        return settings.LANGUAGE_CODE


def site_url(path: str) -> str:
    """An absolute link for a mail: the shop's public origin (PAYMENT_HOST, as the
    payment provider's return links use) and ``path``."""
    return urljoin(get_base_url(), path)


def mail_render(*, template: str, context: dict, to: str, language: str) -> Mail:
    """``emails/<template>_subject.txt`` (one line) and ``emails/<template>.txt``, in ``language``."""
    with translation.override(language):
        subject = " ".join(render_to_string(f"emails/{template}_subject.txt", context).split())
        body = render_to_string(f"emails/{template}.txt", context)
    return Mail(subject=subject, body=body, to=to)


def mail_send(mail: Mail, *, connection=None) -> None:
    """``connection``: one a task keeps open for a batch (one SMTP session, not one per mail).
    fail_silently=False: an unreachable server raises, and the task retries."""
    send_mail(
        mail.subject, mail.body, settings.DEFAULT_FROM_EMAIL, [mail.to], fail_silently=False, connection=connection
    )


def mail_send_once(*, kind: str, reference: str, mail: Mail, connection=None) -> bool:
    """Send ``mail`` unless the (kind, reference) mail went already; True when it went now.
    The claim commits only with a sent mail: a failed send leaves it free for the retry."""
    try:
        with transaction.atomic():
            SentMail.objects.create(kind=kind, reference=reference)
            mail_send(mail, connection=connection)
    except IntegrityError:
        return False
    return True
