"""Every relative link in README.md and docs/**/*.md leads to a file a clone has (tracked by
git, or a page the site generates), and every #anchor to a heading of that file; every
backticked Python name (`package.module.name`) imports and every backticked repository path
(`seckill/room/queue.py`) exists; the pages `make screenshots` shoots exist."""

import importlib
import importlib.util
import re
import subprocess
from itertools import product
from pathlib import Path

import pytest
from django.apps import apps
from django.urls import reverse

from devtools.docs_hooks import GENERATED, github_slug
from devtools.screenshots import SHOTS, shoot

from .helpers import BASE_DIR

# [text](target) and ![alt](target), the target up to a space or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=BASE_DIR, check=True, capture_output=True, text=True).stdout
    return set(out.splitlines())


def documents() -> list[Path]:
    return [BASE_DIR / "README.md", *sorted((BASE_DIR / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return github_slug(text)


def anchors(path: Path) -> set[str]:
    body = FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", body, re.M)}


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text()))


def broken_links() -> list[str]:
    files = tracked() | {f"docs/{page}" for page in GENERATED}
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
            elif anchor and path.suffix == ".md" and path.exists() and anchor not in anchors(path):
                broken.append(f"{where} (no heading #{anchor} in {relative})")
    return broken


# `name` in running text (code fences left out); a name with a space, a placeholder or a URL
# path is no reference.
INLINE_CODE = re.compile(r"`([^`\s<>]+)`")
DOTTED = re.compile(r"^[a-z_]\w*(?:\.[A-Za-z_]\w*)+$")
PATH = re.compile(r"^[\w.-]+(?:/[\w.*{},-]*)*$")


def code_references(path: Path) -> list[str]:
    return INLINE_CODE.findall(FENCE.sub("", path.read_text()))


def django_label_resolves(name: str) -> bool:
    """`orders.Payment` (a model), `seckill.view_all_sales` (a permission): Django's names of
    an installed app's things, not Python's."""
    label, _, thing = name.partition(".")
    try:
        config = apps.get_app_config(label)
    except LookupError:
        return False
    for model in config.get_models():
        if model.__name__ == thing:
            return True
        opts = model._meta
        codenames = {f"{action}_{opts.model_name}" for action in opts.default_permissions}
        if thing in codenames | {codename for codename, _ in opts.permissions}:
            return True
    return False


def python_name_resolves(name: str) -> bool:
    """The longest importable module of `name`, then its attributes one by one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module_name) is not None
        except ImportError:  # a parent that is no package
            found = False
        if not found:
            continue
        if cut == len(parts):
            return True  # a module: found without running it (production settings need their env)
        obj = importlib.import_module(module_name)
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def named_in_code(name: str) -> bool:
    """`core.E001` (a system check's id), `seckill.redis_identity` (a log line's name): a
    string the package's code writes, at the start of a literal."""
    literal = re.compile(rf"[\"']{re.escape(name)}(?![\w.])")
    package = BASE_DIR / name.split(".")[0]
    return any(literal.search(path.read_text()) for path in package.rglob("*.py"))


def ignored(path: str) -> bool:
    """A path git ignores is what a run writes (bench/results/latest.json), not code."""
    return subprocess.run(["git", "check-ignore", "-q", path], cwd=BASE_DIR, check=False).returncode == 0


def expansions(pattern: str) -> list[str]:
    """`orders/services/{creation,lifecycle}.py` as its two paths."""
    pieces = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[piece] if i % 2 == 0 else piece.split(",") for i, piece in enumerate(pieces)]
    return ["".join(combo) for combo in product(*choices)]


def path_exists(pattern: str) -> bool:
    return all(any(BASE_DIR.glob(path)) if "*" in path else (BASE_DIR / path).exists() for path in expansions(pattern))


def broken_code_references() -> list[str]:
    packages = {p.name for p in BASE_DIR.iterdir() if (p / "__init__.py").exists()}
    roots = {name.split("/")[0] for name in tracked() if "/" in name} | {n for n in tracked() if "/" not in n}
    broken = []
    for doc in documents():
        where = doc.relative_to(BASE_DIR)
        for ref in code_references(doc):
            ref = ref.rstrip(".,:;")
            if (
                DOTTED.match(ref)
                and ref.split(".")[0] in packages
                and not python_name_resolves(ref)
                and not django_label_resolves(ref)
                and not named_in_code(ref)
            ):
                broken.append(f"{where}: `{ref}` (no such module or name)")
            elif (
                "/" in ref
                and PATH.match(ref)
                and ref.split("/")[0] in roots
                and not path_exists(ref)
                and not ignored(ref)
            ):
                broken.append(f"{where}: `{ref}` (no such path)")
    return broken


def test_every_code_reference_resolves():
    assert broken_code_references() == []


@pytest.mark.parametrize(
    ("ref", "resolves"),
    [
        ("seckill.room.queue", True),
        ("orders.models.Order.activity", True),
        ("config.settings.production", True),
        ("seckill.gates.purchase_admit", False),
        ("orders.models.NoSuchModel", False),
    ],
)
def test_python_names_resolve_as_imports(ref, resolves):
    assert python_name_resolves(ref) is resolves


@pytest.mark.parametrize(
    ("ref", "resolves"),
    [("orders.Payment", True), ("seckill.view_all_sales", True), ("orders.Nothing", False)],
)
def test_django_labels_resolve_as_models_and_permissions(ref, resolves):
    assert django_label_resolves(ref) is resolves


def test_check_ids_and_log_lines_resolve_as_strings_of_the_code():
    assert named_in_code("core.E001")
    assert named_in_code("seckill.redis_identity")
    assert not named_in_code("core.E999")


def test_repository_paths_expand_braces_and_globs():
    assert path_exists("orders/services/{creation,lifecycle}.py")
    assert path_exists("docs/screenshots/*.png")
    assert not path_exists("orders/services/{creation,nowhere}.py")
    assert not path_exists("seckill/gates.py")


def test_the_readme_stays_a_front_page():
    """Issue 41: what it is, the two commands, a picture, where to go next; the rest is in docs/."""
    readme = (BASE_DIR / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "make run" in readme and "make test" in readme and "![" in readme


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
