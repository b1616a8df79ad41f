"""What the shop keeps about an account beyond Django's user, and the mails already sent."""

from django.conf import settings
from django.db import models


class AccountProfile(models.Model):
    """The language the shopper's mails are written in: the site's language at sign-up,
    then at each login."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account_profile")
    language = models.CharField(max_length=16, choices=settings.LANGUAGES, default=settings.LANGUAGE_CODE)

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language}"


class SentMail(models.Model):
    """A mail that must go at most once (a win, a reminder, a receipt): the sending task
    claims its row in the transaction that sends, so a redelivered task sends nothing."""

    kind = models.CharField(max_length=32)
    reference = models.CharField(max_length=64)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "reference"], name="accounts_one_mail_per_reference")]

    def __str__(self) -> str:
        return f"{self.kind} {self.reference}"
