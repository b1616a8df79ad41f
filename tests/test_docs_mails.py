"""Issue 42: the docs show every mail a shopper gets, in every language of the shop, as
rendered from templates/emails/ (the generated page docs/reference/mails.md,
devtools/docs_mails.py). The page is built here with no database: pytest-django refuses one
to a test not marked for it, as the docs build has none."""

import re

import pytest
from django.conf import settings
from django.template.loader import render_to_string
from django.utils import translation

from core.clock import shop_time
from devtools.docs_hooks import GENERATED
from devtools.docs_mails import SCREENSHOTS, kinds, mails_page, sample_order, screenshot_name
from orders.mails import KINDS

from .helpers import BASE_DIR

TEMPLATES = BASE_DIR / "templates" / "emails"
LANGUAGES = [code for code, _name in settings.LANGUAGES]
MAILS = sorted(path.name.removesuffix("_subject.txt") for path in TEMPLATES.glob("*_subject.txt"))
CHINESE = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def page() -> str:
    return mails_page()


def section(page: str, heading: str) -> str:
    return page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def mail_block(text: str, language: str) -> str:
    """The code block under the language's name."""
    name = dict(settings.LANGUAGES)[language]
    return text.split(f"**{name}**\n\n```text\n", 1)[1].split("\n```", 1)[0]


def test_the_page_is_generated_and_in_the_nav():
    assert "reference/mails.md" in GENERATED
    assert "reference/mails.md" in (BASE_DIR / "mkdocs.yml").read_text()


def test_each_kind_of_mail_has_its_section():
    assert sorted(kind.name for kind in kinds()) == sorted([*KINDS, "password_reset"])
    assert sorted(kind.template for kind in kinds()) == MAILS


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("template", MAILS)
def test_every_mail_template_is_on_the_page_in_every_language(page, template, language):
    """The subject as its template renders it, in its kind's section, under the language."""
    title = sample_order(kind="won", language=language).activity.title
    with translation.override(language):
        subject = " ".join(render_to_string(f"emails/{template}_subject.txt", {"title": title}).split())
    heading = next(kind.heading for kind in kinds() if kind.template == template)
    block = mail_block(section(page, heading), language)
    assert f"\nSubject: {subject}\n" in block
    assert bool(CHINESE.search(subject)) is (language == "zh-hans")


def test_the_win_says_what_the_price_until_when_and_where_to_pay(page):
    order = sample_order(kind="won", language="en")
    block = mail_block(section(page, "The win"), "en")
    assert f"To: {order.user.email}\n" in block
    assert order.activity.title in block and f"¥{order.amount}" in block
    assert f"Pay by: {shop_time(order.pay_deadline)}" in block
    assert re.search(rf"^https?://\S+/orders/{re.escape(order.order_no)}/$", block, re.M)


def test_the_password_reset_carries_a_reset_link(page):
    for language in LANGUAGES:
        block = mail_block(section(page, "The password reset"), language)
        assert re.search(r"^https?://\S+/accounts/reset/\S+/\S+/$", block, re.M), block


def test_the_mail_screenshots_exist_and_are_on_the_page(page):
    for kind, language in SCREENSHOTS:
        name = screenshot_name(kind, language)
        assert (BASE_DIR / "docs" / "screenshots" / name).exists(), name
        assert f"](../screenshots/{name})" in page
