"""Every relative link in README.md and docs/*.md leads to a file a clone has (tracked by
git), and every #anchor to a heading of that file; the pages `make screenshots` shoots exist."""

import re
import subprocess
from pathlib import Path

import pytest
from django.urls import reverse

from devtools.screenshots import SHOTS, shoot

from .helpers import BASE_DIR

# [text](target) and ![alt](target), the target up to a space or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=BASE_DIR, check=True, capture_output=True, text=True).stdout
    return set(out.splitlines())


def documents() -> list[Path]:
    return [BASE_DIR / "README.md", *sorted((BASE_DIR / "docs").glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    body = FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", body, re.M)}


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text()))


def broken_links() -> list[str]:
    files = tracked()
    broken = []
    for doc in documents():
        for target in links(doc):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:…
                continue
            name, _, anchor = target.partition("#")
            path = (doc.parent / name).resolve() if name else doc
            relative = path.relative_to(BASE_DIR).as_posix() if path.is_relative_to(BASE_DIR) else str(path)
            where = f"{doc.relative_to(BASE_DIR)}: {target}"
            if relative not in files:
                broken.append(f"{where} (no tracked file {relative})")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{where} (no heading #{anchor} in {relative})")
    return broken


def test_the_documents_have_links_to_check():
    assert len(documents()) > 3
    assert sum(len(links(doc)) for doc in documents()) > 20


def test_every_relative_link_leads_to_a_tracked_file_and_heading():
    assert broken_links() == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Safe defaults", "safe-defaults"),
        (
            "Sharded stock (S > 1): a claim in a user partition, then a shard",
            "sharded-stock-s--1-a-claim-in-a-user-partition-then-a-shard",
        ),
        ("Sold-out memory (`seckill/soldout.py`)", "sold-out-memory-seckillsoldoutpy"),
    ],
)
def test_anchors_are_githubs(heading, anchor):
    assert slug(heading) == anchor


def test_the_pages_make_screenshots_shoots_exist():
    for shot in SHOTS:
        assert reverse(shot.url_name, args=["A1-0-1-0" if shot.argument == "order_no" else 1])
        assert (BASE_DIR / "docs" / "screenshots" / shot.file).exists(), shot.file


def test_make_screenshots_names_each_page_it_could_not_find(tmp_path):
    problems = shoot("http://127.0.0.1:9", {SHOTS[0].file: None}, "pw", tmp_path)
    assert len(problems) == len(SHOTS)
    assert all(shot.file in problem and shot.url_name in problem for shot, problem in zip(SHOTS, problems, strict=True))
    assert not list(tmp_path.iterdir())
