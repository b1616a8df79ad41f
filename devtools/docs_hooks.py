"""MkDocs hooks of the site (`make docs`, mkdocs.yml).

- The generated reference pages (devtools/docs_reference.py) join the site at build time:
  the HTTP API from the OpenAPI schema, the management commands, the metrics, the mails.
- Headings get GitHub's anchors (the same link works on the site and on the repository's
  pages).
- A link from a page to a file of the repository outside docs/ (a module, .env.example)
  becomes the file's path as code: the site holds no copy of the code. tests/test_docs_links.py
  checks that the file exists.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parent.parent
# The pages devtools/docs_reference.py writes, under docs/reference/.
GENERATED = ("reference/http-api.md", "reference/commands.md", "reference/metrics.md", "reference/mails.md")
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(((?:\.\./)+)([^)#\s]+)\)")


def github_slug(text: str, separator: str = "-") -> str:
    """GitHub's anchor of a heading's text: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", separator)


def on_config(config):
    config["mdx_configs"].setdefault("toc", {})["slugify"] = github_slug
    return config


def on_files(files, config):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "devtools.docs_reference", out], cwd=REPO, check=True)
        for page in GENERATED:
            content = (Path(out) / Path(page).name).read_text()
            files.append(File.generated(config, page, content=content))
    return files


def on_page_markdown(markdown, page, config, files):
    docs_dir = Path(config["docs_dir"]).resolve()
    here = (docs_dir / page.file.src_path).parent

    def as_code(match: re.Match) -> str:
        target = (here / (match.group(2) + match.group(3))).resolve()
        if target.is_relative_to(docs_dir) or not target.is_relative_to(REPO) or not target.exists():
            return match.group(0)  # a page of the site, or a broken link MkDocs reports
        path = target.relative_to(REPO).as_posix()
        text = match.group(1).strip("`")
        return f"`{path}`" if text in (path, target.name) else f"{match.group(1)} (`{path}`)"

    return LINK.sub(as_code, markdown)
