"""An order mail's link opens the order page in the language the mail is written in: a
shopper who reads Chinese and opens the link on another device (no language cookie there)
gets the Chinese page, not the English one."""

import pytest

from accounts.mail import language_remember
from orders.mails import order_mail
from tests.factories import make_activity, make_users
from tests.lifecycle.helpers import buy


@pytest.mark.django_db
def test_the_link_of_a_chinese_mail_opens_the_chinese_page(django_capture_on_commit_callbacks):
    activity = make_activity(stock=2)
    reader, english = make_users(2, prefix="mail-link")
    language_remember(user=reader, language="zh-hans")
    with django_capture_on_commit_callbacks(execute=False):
        orders = {order.user_id: order for order in buy(activity, [reader, english])}
    chinese_order, english_order = orders[reader.pk], orders[english.pk]

    chinese = order_mail(order=chinese_order, kind="won")
    assert f"/zh-hans/orders/{chinese_order.order_no}/" in chinese.body
    plain = order_mail(order=english_order, kind="won")
    assert f"/orders/{english_order.order_no}/" in plain.body
    assert "/zh-hans/" not in plain.body
