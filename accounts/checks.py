"""A deployment that names no mail server still starts; `check --deploy` says so."""

from django.conf import settings
from django.core.checks import Warning, register

NO_MAIL_SERVER = Warning(
    "No mail server is named: the shop's mails (password reset, wins, reminders, receipts) go to "
    "SMTP on localhost:25 and fail, retried and logged as errors, when nothing listens there.",
    hint="Set EMAIL_URL (e.g. smtp+tls://user:password@mail.example.com:587) or EMAIL_HOST and friends.",
    id="accounts.W001",
)


@register(deploy=True)
def mail_server_named(app_configs, **kwargs):
    return [] if getattr(settings, "EMAIL_CONFIGURED", True) else [NO_MAIL_SERVER]
