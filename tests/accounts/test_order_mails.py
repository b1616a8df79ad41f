"""The shopper's mails about an order, from real orders through the real services: the
win, the reminder before the pay deadline, the cancellation (shopper, expiry, staff) and
the receipt; each once, in the shopper's language. The tasks run eagerly into Django's
outbox here; once end to end through the real server, a real worker and a real SMTP
server, which is first away: the mail is retried and the order stands."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from accounts.mail import language_of
from accounts.models import AccountProfile
from orders.mails import order_mail, order_mails_task, order_reminders_task
from orders.models import Order
from orders.services.lifecycle import order_cancel
from seckill.sale.activities import activity_token_ensure
from tests.factories import UserFactory, make_activity, make_users
from tests.helpers import free_port, purchase, start_celery_worker, start_gunicorn, wait_until
from tests.lifecycle.helpers import buy
from tests.mail_fixtures import Inbox, celery_eager, mail_env  # noqa: F401 - fixtures
from tests.paying import pay_through_provider


def won(activity, user, capture) -> Order:
    with capture(execute=True):
        (order,) = buy(activity, [user])
    return order


@pytest.fixture
def mails(mailoutbox, celery_eager, django_capture_on_commit_callbacks):  # noqa: F811
    """The outbox, and the capture of the on-commit callbacks that enqueue the mails."""
    return mailoutbox, django_capture_on_commit_callbacks


@pytest.mark.django_db
def test_a_winner_is_told_what_they_won_the_amount_and_until_when_to_pay(mails):
    outbox, capture = mails
    activity = make_activity(title="Red kettle", seckill_price="12.50")
    order = won(activity, UserFactory(username="wendy", email="wendy@example.com"), capture)
    (mail,) = outbox
    assert mail.to == ["wendy@example.com"] and mail.subject == "You got it: Red kettle"
    deadline = timezone.localtime(order.pay_deadline).strftime("%Y-%m-%d %H:%M:%S")
    zone = timezone.get_current_timezone_name()
    assert "1 × Red kettle" in mail.body and "¥12.50" in mail.body
    assert f"Pay by: {deadline} {zone}\n" in mail.body
    assert f"http://localhost:8000/orders/{order.order_no}/" in mail.body


@pytest.mark.django_db
def test_each_mail_goes_once_and_a_shopper_without_an_address_gets_none(mails):
    outbox, capture = mails
    activity = make_activity()
    order = won(activity, UserFactory(email="once@example.com"), capture)
    assert order_mails_task("won", [order.pk]) == 0  # a redelivered task sends nothing
    (silent,) = make_users(1)
    assert won(activity, silent, capture).status == Order.Status.PENDING
    assert [m.to for m in outbox] == [["once@example.com"]]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("reason", "says"),
    [("shopper", "You cancelled it."), ("staff", "The shop cancelled it."), ("timeout", "It was not paid before")],
)
def test_a_cancelled_order_is_told_why(mails, reason, says):
    outbox, capture = mails
    order = won(make_activity(title="Lamp"), UserFactory(email="c@example.com"), capture)
    if reason == "timeout":
        Order.objects.filter(pk=order.pk).update(pay_deadline=timezone.now() - timedelta(seconds=1))
    with capture(execute=True):
        order_cancel(order=order, reason=reason)
    assert [m.subject for m in outbox] == ["You got it: Lamp", "Order cancelled: Lamp"]
    assert says in outbox[1].body and order.order_no in outbox[1].body


@pytest.mark.django_db
def test_a_paid_order_gets_its_receipt(mails):
    outbox, capture = mails
    order = won(make_activity(title="Mug", seckill_price="3.00"), UserFactory(email="p@example.com"), capture)
    with capture(execute=True):
        pay_through_provider(order)
    assert [m.subject for m in outbox] == ["You got it: Mug", "Receipt: Mug"]
    assert "Amount paid: ¥3.00" in outbox[1].body


@pytest.mark.django_db
def test_the_reminder_goes_once_when_a_quarter_of_the_pay_window_is_left(mails, settings):
    outbox, capture = mails
    settings.ORDER_MAIL_REMINDER_SHARE = 0.25
    activity = make_activity(title="Fan")
    late, early = (won(activity, UserFactory(email=f"{n}@example.com"), capture) for n in ("late", "early"))
    now = timezone.now()
    Order.objects.filter(pk=late.pk).update(
        created_at=now - timedelta(minutes=9), pay_deadline=now + timedelta(minutes=1)
    )
    Order.objects.filter(pk=early.pk).update(
        created_at=now - timedelta(minutes=1), pay_deadline=now + timedelta(minutes=9)
    )
    assert order_reminders_task() == 1
    assert order_reminders_task() == 0  # no mail twice
    reminders = [m for m in outbox if m.subject.startswith("Reminder")]
    assert [m.to for m in reminders] == [["late@example.com"]]
    assert "Reminder: pay for Fan soon" == reminders[0].subject and late.order_no in reminders[0].body


@pytest.mark.django_db
def test_the_mails_are_in_the_shoppers_language(mails):
    outbox, capture = mails
    shopper = UserFactory(email="zh@example.com")
    AccountProfile.objects.create(user=shopper, language="zh-hans")
    order = won(make_activity(title="电水壶"), shopper, capture)
    with capture(execute=True):
        order_cancel(order=order, reason="shopper")
    assert [m.subject for m in outbox] == ["抢到了：电水壶", "订单已取消：电水壶"]
    assert "付款截止" in outbox[0].body and "您取消了它。" in outbox[1].body


@pytest.mark.django_db
def test_chinese_mails_are_punctuated_as_chinese(mails):
    """A label ends with a full-width colon, and two Chinese sentences follow each other
    with no space between them (the English template's colon and space are not theirs)."""
    outbox, capture = mails
    shopper = UserFactory(email="zh-punct@example.com")
    AccountProfile.objects.create(user=shopper, language="zh-hans")
    activity = make_activity(title="电水壶")
    paid = won(activity, shopper, capture)
    with capture(execute=True):
        pay_through_provider(paid)
    for reason in ("shopper", "timeout", "staff"):
        (other,) = make_users(1, prefix=f"zh-{reason}-")
        other.email = f"{reason}@example.com"
        other.save()
        AccountProfile.objects.create(user=other, language="zh-hans")
        order = won(activity, other, capture)
        if reason == "timeout":
            Order.objects.filter(pk=order.pk).update(pay_deadline=timezone.now() - timedelta(seconds=1))
        with capture(execute=True):
            order_cancel(order=order, reason=reason)
    (late,) = make_users(1, prefix="zh-late-")
    late.email = "late-zh@example.com"
    late.save()
    AccountProfile.objects.create(user=late, language="zh-hans")
    reminded = won(activity, late, capture)
    now = timezone.now()
    Order.objects.filter(pk=reminded.pk).update(
        created_at=now - timedelta(minutes=9), pay_deadline=now + timedelta(minutes=1)
    )
    assert order_reminders_task() == 1
    bodies = [m.body for m in outbox]
    assert len(bodies) == 10, [m.subject for m in outbox]  # 5 wins, a receipt, 3 cancels, a reminder
    for body in bodies:
        for line in body.splitlines():
            assert ": " not in line, f"an ASCII colon after a Chinese label: {line!r}"
            assert "。 " not in line, f"a space between two Chinese sentences: {line!r}"
    assert any("订单：" in body for body in bodies)


def language_switch(client: Client, language: str, next_path: str):
    """The site's language switch as its button posts it (templates/base.html)."""
    return client.post("/i18n/setlang/", {"language": language, "next": next_path})


@pytest.mark.django_db
def test_the_language_switch_of_a_signed_in_shopper_is_the_language_of_the_next_mail(mails):
    outbox, capture = mails
    shopper = UserFactory(email="switcher@example.com")
    AccountProfile.objects.create(user=shopper, language="en")
    client = Client(HTTP_ACCEPT_LANGUAGE="en-US")
    client.force_login(shopper)
    assert language_switch(client, "zh-hans", "/orders/")["Location"] == "/zh-hans/orders/"
    order = won(make_activity(title="电水壶"), shopper, capture)
    assert [m.subject for m in outbox] == ["抢到了：电水壶"]
    assert language_switch(client, "en", "/orders/")["Location"] == "/orders/"
    again = Order.objects.select_related("user", "activity").get(pk=order.pk)
    assert order_mail(order=again, kind="won").subject == "You got it: 电水壶"
    # Someone else's switch, signed out, changes no one's mails.
    language_switch(Client(), "zh-hans", "/")
    assert language_of(get_user_model().objects.get(pk=shopper.pk)) == "en"


def test_the_win_through_the_real_server_a_worker_and_smtp_away_then_back(transactional_db, process_logs):
    port = free_port()
    env = mail_env(f"smtp://127.0.0.1:{port}")
    activity = make_activity(title="Real kettle")
    (shopper,) = make_users(1)
    shopper.email = "real@example.com"
    shopper.save(update_fields=["email"])
    AccountProfile.objects.create(user=shopper, language="en")
    web, base = start_gunicorn(process_logs, env=env)
    worker = start_celery_worker(process_logs, env=env)
    controller = None
    try:
        key = shopper.auth_token.key
        status, _body, _headers = purchase(base, activity.pk, key, activity_token_ensure(activity_id=activity.pk))
        assert status == 202
        # The order is made although the mail server is away; the mail is retried, logged.
        order = wait_until(lambda: Order.objects.filter(user=shopper).first(), timeout=60, what="the order")
        wait_until(lambda: "Retry in" in worker.log(), timeout=60, what="the mail's retry")
        from aiosmtpd.controller import Controller

        inbox = Inbox()
        controller = Controller(inbox, hostname="127.0.0.1", port=port)
        controller.start()
        bodies = wait_until(lambda: inbox.bodies_to("real@example.com"), timeout=90, what="the winner's mail")
        assert order.order_no in bodies[0] and f"/orders/{order.order_no}/" in bodies[0]
        assert Order.objects.get(pk=order.pk).status == Order.Status.PENDING
    finally:
        worker.stop()
        web.stop()
        if controller is not None:
            controller.stop()
