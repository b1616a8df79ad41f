"""The shopper's language, kept at each login: their mails are written in it."""

from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver

from .mail import language_remember


@receiver(user_logged_in, dispatch_uid="accounts.signals.language_on_login")
def _language_on_login(sender, request, user, **kwargs):
    if request is not None:
        language_remember(user=user, language=getattr(request, "LANGUAGE_CODE", ""))
