"""Mail in the tests: Celery's eager mode (the real task, in this process, into Django's
locmem outbox) and a real SMTP server on loopback (aiosmtpd) for a real worker to send to.
A test module imports the fixtures it uses."""

import email
import email.policy
import threading

import pytest
from aiosmtpd.controller import Controller

from tests.helpers import free_port, subprocess_env


@pytest.fixture
def celery_eager():
    """Tasks run where they are enqueued (Celery's task_always_eager): their mails land in
    ``mailoutbox``. Errors propagate, as they would fail a worker's task."""
    from config.celery_app import app

    before = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = before


class Inbox:
    """aiosmtpd's handler: every message received, parsed."""

    def __init__(self):
        self.messages: list[email.message.EmailMessage] = []
        self.recipients: list[list[str]] = []
        self._lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self._lock:
            self.messages.append(message)
            self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"

    def bodies_to(self, address: str) -> list[str]:
        with self._lock:
            pairs = list(zip(self.messages, self.recipients, strict=True))
        return [m.get_body(preferencelist=("plain",)).get_content() for m, rcpt in pairs if address in rcpt]


@pytest.fixture
def smtp_server():
    """A real SMTP server on a free loopback port; yields (inbox, the EMAIL_URL to reach it)."""
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, f"smtp://127.0.0.1:{port}"
    controller.stop()


def mail_env(email_url: str, **extra: str) -> dict[str, str]:
    """The environment of a process (worker, server) that sends its mail to ``email_url``."""
    return subprocess_env(EMAIL_URL=email_url, **extra)
