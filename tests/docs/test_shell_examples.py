"""The docs' shell examples, run as a reader runs them beside `make run`.

One `make run` (devtools.stack, through tests/test_make_run.py's Stack) serves the module, on
the suite's database and Redis pair, with seed_demo's sales and shoppers. Each ```sh block of
the docs that queries the shop or runs a management command is read from the doc at test time
and run with bash, one command at a time, in one shell session per doc (a variable an example
sets is there for the next). The test substitutes only what the reader does: BASE (the stack's
address), a value the doc's earlier answer showed (an order number, a payment reference, an
id), an ``<id>`` the doc says a command printed, and `python manage.py …` as `make -s manage
ARGS="…"` (what the docs tell a workstation's reader to run).

Each answer is compared with what the doc shows after the command: the ```json block after the
example, or a comment (``# 409 {"code": "address_required", …}``). Same keys (``…`` allows
more), same status and codes, same types; values that differ by nature (times, ids, tokens,
references) by their shape. curl's HTTP status is read from its stderr (a `curl` first on the
PATH adds ``-w '%{stderr}…'``): stdout stays what the reader sees.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from ..helpers import BASE_DIR, wait_until
from ..test_make_run import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DOCS = BASE_DIR / "docs"
EXAMPLE_DOCS = [
    "API.md",
    "WAITING-ROOM.md",  # the demo's room sale, within its first five minutes (its pre-queue)
    "tutorial/first-sale.md",
    *sorted(f"how-to/{p.name}" for p in (DOCS / "how-to").glob("*.md")),
]
DOC_BASE = "http://127.0.0.1:8000"  # the docs' BASE: make run's default address
STATUS_MARK = "HTTP-STATUS"
SHOP_OFFSET = "+08:00"  # make run's Asia/Shanghai, as the docs say
ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?([+-]\d\d:\d\d)$")
# Values that differ by nature from run to run: compared by their shape only. A string's
# actual value replaces the doc's in the commands after it, as the reader copies it.
SHAPES: dict[str, type | re.Pattern] = {
    "id": int,
    "activity": int,
    "token": re.compile(r"^[A-Za-z0-9_-]{20,}$"),
    "reservation": re.compile(r"^\d+-\d+$"),
    "order_no": re.compile(r"^A\d+-\d+-\d+-\d+$"),
    "reference": re.compile(r"^[A-Za-z0-9_-]+$"),
    "admin": re.compile(r"^rehearsal-admin-[0-9a-z]+$"),
}
# A command is an example to run when it asks the shop or runs a management command.
RUNS = re.compile(r"^(curl\s|python manage\.py\s|make -s manage\s|make manage\s)")
ASSIGNS = re.compile(r"^([A-Z_][A-Z0-9_]*)=(\$\(.*\)|\S*)$", re.S)


# --- reading the docs ---------------------------------------------------------------------


@dataclass
class Command:
    text: str  # as the doc writes it
    line: int
    answer: str = ""  # the comment the doc writes as its answer


@dataclass
class Example:
    doc: str
    line: int
    commands: list[Command]
    shown: str | None = None  # the ```json block after it: the last command's answer
    codes: list[str] = field(default_factory=list)  # a table of `code`s after it


def fences(text: str) -> list[tuple[str, int, str, int]]:
    """Each fenced block: (language, first line's number, its text unindented, the line after it)."""
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        indent, body, j = len(opening.group(1)), [], i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        found.append((opening.group(2), i + 2, "\n".join(body), j + 1))
        i = j + 1
    return found


def balance(text: str) -> int:
    """Open brackets less closed ones, outside JSON strings."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            escaped, in_string = (not escaped and char == "\\"), in_string and (escaped or char != '"')
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
    return depth


def split_commands(text: str, first_line: int) -> list[Command]:
    """The commands of a block (continued lines and quoted newlines joined), each with the
    comment that answers it: on its line, or on the lines after it when the comment starts
    like an answer (a status, JSON, a figure)."""
    commands: list[Command] = []
    current: list[str] = []
    quote, depth, open_answer = "", 0, False

    def answered(comment: str) -> None:
        nonlocal open_answer
        if not commands:
            return
        last = commands[-1]
        if open_answer:
            last.answer += " " + comment
        elif re.match(r"^[\[{0-9]", comment) and not last.answer:
            last.answer = comment
        else:
            return
        open_answer = balance(last.answer) > 0

    for number, line in enumerate(text.splitlines(), start=first_line):
        if not current and line.strip().startswith("#"):
            answered(line.strip()[1:].strip())
            continue
        if not current and not line.strip():
            continue
        code, comment, i = line, None, 0
        while i < len(line):
            char = line[i]
            if quote == "'":
                quote = "" if char == "'" else quote
            elif char == "\\":
                i += 1
            elif quote == '"':
                quote = "" if char == '"' else quote
            elif char in "'\"":
                quote = char
            elif line.startswith("$(", i):
                depth += 1
                i += 1
            elif char == ")" and depth:
                depth -= 1
            elif char == "#" and (i == 0 or line[i - 1].isspace()):
                code, comment = line[:i].rstrip(), line[i + 1 :].strip()
                break
            i += 1
        if not current:
            start = number
        current.append(code)
        if quote or depth or code.endswith("\\"):
            continue
        commands.append(Command("\n".join(current), start))
        current, open_answer = [], False
        if comment:
            answered(comment)
    return commands


def examples_of(doc: str) -> list[Example]:
    """The doc's shell examples that ask the shop or run a management command."""
    text = (DOCS / doc).read_text()
    lines = text.splitlines()
    blocks = fences(text)
    found = []
    for index, (language, line, body, after) in enumerate(blocks):
        if language not in ("sh", "bash", "shell"):
            continue
        commands = split_commands(body, line)
        if not any(RUNS.match(c.text) or "manage" in c.text or "curl " in c.text for c in commands):
            continue
        if not all(RUNS.match(c.text) or ASSIGNS.match(c.text) for c in commands):
            continue  # make run, make rehearse, Locust, redis-cli: not a question to the shop
        example = Example(doc, line, commands)
        rest = [n for n in range(after, len(lines)) if lines[n].strip()]
        if rest and index + 1 < len(blocks) and blocks[index + 1][0] == "json" and blocks[index + 1][1] == rest[0] + 2:
            example.shown = blocks[index + 1][2]
        elif rest and lines[rest[0]].replace(" ", "").startswith("|`code`|"):
            table = []
            for n in rest[2:]:
                if not lines[n].startswith("|"):
                    break
                table.append(lines[n])
            example.codes = [re.findall(r"`([a-z_]+)`", row.split("|")[1])[0] for row in table]
        found.append(example)
    return found


def docs_with_examples() -> list[str]:
    return [doc for doc in EXAMPLE_DOCS if examples_of(doc)]


# --- comparing an answer with the doc's ------------------------------------------------------


def doc_json(text: str):
    """The doc's JSON, where a bare … stands for more keys: {"code": "x", …}."""
    return json.loads(re.sub(r",\s*…\s*}", ', "…": true}', text))


def shape_of_elided(value: str) -> re.Pattern:
    """A string the doc cut short ("5f0c…", "/payments/simulated/5f0c…/"): its literal parts."""
    parts = re.split(r"[A-Za-z0-9_-]*…", value)
    return re.compile("^" + "[A-Za-z0-9_-]+".join(map(re.escape, parts)) + "$")


def differences(shown, actual, path: str = "", learned: dict | None = None) -> list[str]:
    """How ``actual`` differs from what the doc shows (nothing when it agrees); the values the
    doc shows by example (ids, references) are put in ``learned`` as doc value → actual."""
    learned = learned if learned is not None else {}
    key = path.rsplit(".", 1)[-1]
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{path or 'answer'}: an object in the doc, {actual!r} here"]
        shown = dict(shown)
        more = shown.pop("…", False)
        missing = sorted(set(shown) - set(actual))
        extra = [] if more else sorted(set(actual) - set(shown))
        found = []
        if missing:
            found.append(f"{path or 'answer'}: keys missing {missing}")
        if extra:
            found.append(f"{path or 'answer'}: keys the doc does not show {extra}")
        for name in shown:
            if name in actual:
                found += differences(shown[name], actual[name], f"{path}.{name}".lstrip("."), learned)
        return found
    if isinstance(shown, list):
        if not isinstance(actual, list) or len(actual) != len(shown):
            return [f"{path}: {len(shown)} items in the doc, {actual!r} here"]
        return [
            d
            for i, pair in enumerate(zip(shown, actual, strict=True))
            for d in differences(*pair, f"{path}[{i}]", learned)
        ]
    if shown is None or isinstance(shown, bool) or type(shown) is not type(actual):
        return [] if shown == actual and type(shown) is type(actual) else [f"{path}: {shown!r} in the doc, {actual!r}"]
    if isinstance(shown, str) and ISO_TIME.match(shown):
        time = ISO_TIME.match(actual)
        ok = time and time.group(2) == ISO_TIME.match(shown).group(2) == SHOP_OFFSET
        return [] if ok else [f"{path}: a time with the shop's offset {SHOP_OFFSET} in the doc, {actual!r}"]
    if isinstance(shown, str) and "…" in shown:
        learned[shown] = actual
        return [] if shape_of_elided(shown).match(actual) else [f"{path}: {shown!r} in the doc, {actual!r}"]
    shape = SHAPES.get(key)
    if shape is int:
        return []
    if isinstance(shape, re.Pattern):
        learned[shown] = actual
        return [] if shape.match(actual) else [f"{path}: {shown!r} in the doc, {actual!r} has another shape"]
    return [] if shown == actual else [f"{path}: {shown!r} in the doc, {actual!r}"]


@dataclass
class Outcome:
    exit_code: int
    out: str
    err: str
    status: int | None  # curl's last HTTP status

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError:
            return None


def against_answer(command: Command, outcome: Outcome, learned: dict) -> list[str]:
    """How the outcome differs from the comment the doc writes as the command's answer."""
    found = []
    status = re.match(r"^(\d{3})\s+(.*)$", command.answer, re.S)
    rest = status.group(2) if status else command.answer
    if status and outcome.status != int(status.group(1)):
        found.append(f"status {status.group(1)} in the doc, {outcome.status}")
    if rest.startswith(("{", "[")):
        end = next(i for i in range(1, len(rest) + 1) if balance(rest[:i]) == 0 and rest[i - 1] in "}]")
        if not status and outcome.status is not None and outcome.status >= 300:
            found.append(f"status {outcome.status} where the doc shows a success")
        found += differences(doc_json(rest[:end]), outcome.json(), learned=learned)
    elif status:
        code = rest.split()[0].strip("`")
        answer = outcome.json()
        if not isinstance(answer, dict) or answer.get("code") != code:
            found.append(f"code {code} in the doc, {outcome.out!r}")
    else:  # a line of text: its figures may differ
        pattern = r"\d+".join(re.escape(part) for part in re.split(r"\d+", rest))
        if not re.search(pattern, outcome.out):
            found.append(f"{rest!r} in the doc, {outcome.out!r}")
    return found


# --- the reader's shell -----------------------------------------------------------------------


class Session:
    """One reader's shell beside the stack: the variables an example sets stay for the next."""

    def __init__(self, stack: Stack, folder: Path):
        self.folder = folder
        real = shutil.which("curl")
        assert real, "curl not found: the docs' examples use it (.ci/system-packages installs it)"
        shim = folder / "bin" / "curl"
        shim.parent.mkdir()
        shim.write_text(f"#!/bin/sh\nexec {real} -w '%{{stderr}}{STATUS_MARK} %{{http_code}}\\n' \"$@\"\n")
        shim.chmod(0o755)
        # A reader's shell: no make of its own around it.
        self.env = {k: v for k, v in stack.env.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
        self.env["PATH"] = f"{shim.parent}:{self.env['PATH']}"
        self.substitutions = {DOC_BASE: stack.base}
        self.answered: dict = {}  # the last value of each key the JSON answers gave

    def prepared(self, text: str) -> str:
        """The command as the reader types it: the doc's values replaced by this shop's."""
        for shown in sorted(self.substitutions, key=len, reverse=True):
            text = re.sub(rf"(?<![\w.+-]){re.escape(shown)}(?![\w.])", self.substitutions[shown], text)
        for placeholder in re.findall(r"<(\w+)>", text):
            assert placeholder in self.answered, f"no answer before gave {placeholder}: {text}"
            text = text.replace(f"<{placeholder}>", str(self.answered[placeholder]))
        manage = re.match(r"^python manage\.py\s+(.*)$", text, re.S)
        if manage:
            args = re.sub(r"\s*\\\n\s*", " ", manage.group(1)).replace("'", "'\\''")
            text = f"make -s manage ARGS='{args}'"
        return text

    def run(self, text: str) -> Outcome:
        assigned = ASSIGNS.match(text)
        values = self.folder / "values"
        script = text + "\n__rc=$?\n"
        if assigned:
            script += f'printf "%s" "${{{assigned.group(1)}}}" > "{values}"\n'
        script += "exit $__rc\n"
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            start_new_session=True,
        )
        statuses = re.findall(rf"^{STATUS_MARK} (\d+)$", done.stderr, re.M)
        err = re.sub(rf"^{STATUS_MARK} \d+\n", "", done.stderr, flags=re.M)
        if assigned:
            self.env[assigned.group(1)] = values.read_text()
        outcome = Outcome(done.returncode, done.stdout, err, int(statuses[-1]) if statuses else None)
        answer = outcome.json()
        if isinstance(answer, dict):
            self.answered.update(answer)
        return outcome


def check(session: Session, example: Example, index: int, command: Command) -> list[str]:
    """Run one command and say how its answer differs from the doc's (nothing when it agrees)."""
    text = session.prepared(command.text)
    is_last = index == len(example.commands) - 1
    assigned = ASSIGNS.match(command.text)
    # A GET is safe to ask again: the worker makes the order a moment after the 202.
    patient = text.startswith("curl") and " -X " not in text
    learned: dict = {}
    last: list[str] = []

    def agrees():
        nonlocal last
        learned.clear()
        outcome = session.run(text)
        found = [] if outcome.exit_code == 0 else [f"exit status {outcome.exit_code}: {outcome.err[-800:]}"]
        if assigned and not session.env[assigned.group(1)]:
            found.append(f"{assigned.group(1)} is empty: {outcome.err[-800:]}")
        if command.answer:
            found += against_answer(command, outcome, learned)
        elif is_last and example.shown:
            found += against_answer(Command(text, command.line, example.shown), outcome, learned)
        elif is_last and example.codes:
            answer = outcome.json()
            if not isinstance(answer, dict) or answer.get("code") not in example.codes:
                found.append(f"a code of the table {example.codes} in the doc, {outcome.out!r}")
        elif outcome.status is not None and outcome.status >= 300:
            found.append(f"status {outcome.status}: {outcome.out!r}")
        if "--json" in text and outcome.json() is None:
            found.append(f"not JSON: {outcome.out!r}")
        last = found
        return not found

    if patient:
        # Past the deadline the last differences found are the report, not the timeout.
        with contextlib.suppress(AssertionError):
            wait_until(agrees, timeout=60, interval=0.5, what="the doc's answer")
    else:
        agrees()
    session.substitutions.update(learned)
    return [f"{example.doc}:{command.line}: {text}\n    {d}" for d in last]


# --- the shop ---------------------------------------------------------------------------------


def suite_servers() -> dict[str, str]:
    """The suite's database and Redis pair, as a reader's DATABASE_URL / REDIS_URL."""
    from django.conf import settings
    from django.db import connection

    database = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{connection.settings_dict['NAME']}")
    return {
        "DATABASE_URL": urlunsplit(database),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        # The suite's Redis keeps nothing on disk (config.settings.test says the same).
        "SECKILL_ALLOW_VOLATILE_REDIS": "true",
    }


def emptied() -> None:
    """The database as a first `make run` finds it (the ids from 1, the staff groups) and the
    Redis pair empty."""
    import redis
    from django.conf import settings
    from django.core.management import call_command

    from stock.redis_client import stock_redis

    from ..helpers import staff_groups_create

    call_command("flush", interactive=False, verbosity=0)  # sequences reset: the demo mug is 1
    staff_groups_create()
    stock_redis().flushdb()
    if settings.CELERY_BROKER_URL.startswith("redis"):
        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()


@pytest.fixture(scope="module")
def shop(django_db_setup, django_db_blocker, tmp_path_factory):
    """`make run` (devtools.stack) on the suite's database and Redis, ready: its banner shown."""
    with django_db_blocker.unblock():
        emptied()
        services = suite_servers()
    (BASE_DIR / ".local").mkdir(exist_ok=True)
    state_dir = Path(tempfile.mkdtemp(prefix="docs-stack-", dir=BASE_DIR / ".local"))
    state_dir.chmod(0o755)  # nginx's workers read its configuration there
    stack = Stack(state_dir, tmp_path_factory.mktemp("docs-stack") / "stack.log", services=services)
    try:
        wait_until(
            lambda: stack.proc.poll() is not None or "ready: the shop at" in stack.output(),
            timeout=300,
            interval=0.5,
            what="make run's banner",
        )
        assert stack.proc.poll() is None, stack.output()[-4000:]
        yield stack
    finally:
        stack.stop(signal.SIGINT)
        shutil.rmtree(state_dir, ignore_errors=True)
        with django_db_blocker.unblock():
            emptied()


@pytest.fixture
def clean_redis():
    """The stack's Redis pair is the module's: emptied before it starts and after it stops,
    not between the docs (the suite's own clean_redis would take the demo sale's stock away)."""
    yield


# django_db: the suite's test database exists for it (the test itself writes nothing there).
@pytest.mark.django_db
@pytest.mark.parametrize("doc", docs_with_examples())
def test_the_docs_shell_examples_answer_what_the_docs_show(shop, doc, tmp_path):
    made_here = [name for name in ("tokens.txt",) if not (BASE_DIR / name).exists()]
    session = Session(shop, tmp_path)
    found: list[str] = []
    try:
        for example in examples_of(doc):
            for index, command in enumerate(example.commands):
                found += check(session, example, index, command)
    finally:
        for name in made_here:  # the rehearsal example writes its tokens where it runs
            (BASE_DIR / name).unlink(missing_ok=True)
    assert not found, f"{len(found)} answers differ from {doc}:\n" + "\n".join(found)


def test_the_docs_examples_are_found():
    """The reading itself: the API's walkthrough, its answers and the operator commands."""
    api = examples_of("API.md")
    commands = [c for e in api for c in e.commands]
    assert any("drf_create_token alice" in c.text for c in commands)
    assert sum(1 for e in api if e.shown) >= 3 and any(e.codes for e in api)
    assert any(c.answer.startswith("409 {") for c in commands)
    assert any(c.text.startswith("python manage.py create_activity") for c in commands)
    assert set(docs_with_examples()) >= {"API.md", "WAITING-ROOM.md", "how-to/run-a-big-sale.md"}
