"""The account mails' sending (the password reset): off the request's path, retried by
Celery while the mail server is away (smtplib's errors are OSErrors), logged when it fails."""

from celery import shared_task

from .mail import Mail, mail_send

# An unreachable server retried for about an hour (backoff 10 s doubling, capped at 10 min).
MAIL_TASK_OPTIONS = {
    "acks_late": True,
    "autoretry_for": (OSError,),
    "retry_backoff": 10,
    "retry_backoff_max": 600,
    "max_retries": 8,
}


@shared_task(**MAIL_TASK_OPTIONS)
def mail_send_task(subject: str, body: str, to: str) -> None:
    mail_send(Mail(subject=subject, body=body, to=to))
