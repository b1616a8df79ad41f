"""Words and average sentence length of README.md and docs/**/*.md.

    python -m devtools.docs_stats            # per file, then the totals
    python -m devtools.docs_stats --total    # the totals only

Prose only: fenced code, HTML comments, tables and headings are left out of the sentences;
inline code counts as one word. A sentence ends at . ! or ? before a capital, a digit or
the end of its paragraph; a list item or a paragraph ends one too. Pages written by a
program (the benchmarks, the drills, the settings table) are counted apart.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GENERATED = {"docs/BENCHMARKS.md", "docs/DRILLS.md", "docs/reference/settings.md"}

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
CODE = re.compile(r"`[^`]+`")
ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9`\"'(*])")
WORD = re.compile(r"[\w’'-]+")


@dataclass
class Stats:
    words: int = 0
    sentences: int = 0
    sentence_words: int = 0

    def add(self, other: Stats) -> None:
        self.words += other.words
        self.sentences += other.sentences
        self.sentence_words += other.sentence_words

    @property
    def average(self) -> float:
        return self.sentence_words / self.sentences if self.sentences else 0.0


def blocks(text: str) -> list[str]:
    """The prose of a page as paragraphs and list items, each one line."""
    text = COMMENT.sub("", FENCE.sub("", text))
    text = CODE.sub("code", LINK.sub(r"\1", IMAGE.sub("", text)))
    out: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "|")):  # a heading or a table row
            if current:
                out.append(" ".join(current))
            current = []
            continue
        if ITEM.match(line):
            if current:
                out.append(" ".join(current))
            current = [ITEM.sub("", line)]
        else:
            current.append(stripped.lstrip("> "))  # a quote's text is prose
    if current:
        out.append(" ".join(current))
    return out


def page_stats(path: Path) -> Stats:
    text = path.read_text()
    stats = Stats()
    stats.words = len(WORD.findall(COMMENT.sub("", FENCE.sub("", text))))
    for block in blocks(text):
        for sentence in SENTENCE_END.split(block):
            n = len(WORD.findall(sentence))
            if n:
                stats.sentences += 1
                stats.sentence_words += n
    return stats


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", action="store_true", help="print the totals only")
    args = parser.parse_args()
    written, generated = Stats(), Stats()
    for path in pages():
        name = path.relative_to(REPO).as_posix()
        stats = page_stats(path)
        (generated if name in GENERATED else written).add(stats)
        if not args.total:
            print(f"{name:40} {stats.words:7,} words  {stats.average:5.1f} words a sentence")
    both = Stats()
    both.add(written)
    both.add(generated)
    for label, stats in (("written", written), ("generated", generated), ("all", both)):
        print(f"{label:40} {stats.words:7,} words  {stats.average:5.1f} words a sentence")


if __name__ == "__main__":
    main()
