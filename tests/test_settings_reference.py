"""The shop's own settings have one source, config/settings/registry.py (declared by domain
in config/settings/declared/): the reference page and .env.example are what
`python -m config.settings.reference` writes from it, the code reads no SECKILL_* name the
table does not declare, every declared setting is read, and a value outside its bound
stops the start-up."""

import ast
import re
from pathlib import Path

import environ
import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings import reference, registry

from .helpers import BASE_DIR

# Where the shop's code reads its settings (the brief of the check: tests and tools aside).
PACKAGES = ("core", "inventory", "stock", "orders", "seckill", "server", "config")
# SECKILL_* names that are no setting of a deployment: the test suite's and the dev tools'
# environment, read by config/settings/test.py and config/celery_app.py.
HARNESS = {
    "SECKILL_READY_DIR": "devtools.stack: the folder a Celery worker marks itself ready in",
    "SECKILL_TEST_DATABASE_NAME": "the test database the processes a test starts use",
    "SECKILL_TEST_MANIFEST_STATIC": "test processes that serve the fingerprinted static files",
    "SECKILL_TEST_REDIS_DB": "the Redis databases the suite owns",
}
SECKILL_NAME = re.compile(r"\bSECKILL_[A-Z0-9_]*[A-Z0-9]\b")
BASE = BASE_DIR / "config" / "settings" / "base.py"
SETTINGS_DIR = BASE.parent
DECLARED = {setting.name for setting in registry.SETTINGS}
# The table's own files (a name declared there is not read there): the gatherer, what a
# setting is, and the declarations by domain.
DECLARATIONS = {
    SETTINGS_DIR / "registry.py",
    SETTINGS_DIR / "schema.py",
    *(SETTINGS_DIR / "declared").glob("*.py"),
}
PYTHON_TYPE = {
    registry.Kind.STR: "str",
    registry.Kind.RATE: "str",
    registry.Kind.BOOL: "bool",
    registry.Kind.INT: "int",
    registry.Kind.FLOAT: "float",
    registry.Kind.PATH: "Path",
}


def sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (BASE_DIR / package).rglob("*.py"))


def base_bindings(tree: ast.Module | None = None) -> dict[str, ast.AnnAssign]:
    """base.py's ``NAME: type = _own["NAME"]`` lines: what the table declares, bound by name."""
    found = {}
    for statement in (tree or ast.parse(BASE.read_text())).body:
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(statement.value, ast.Subscript)
            and isinstance(statement.value.value, ast.Name)
            and statement.value.value.id == "_own"
        ):
            found[statement.target.id] = statement
    return found


def reads(path: Path) -> set[str]:
    """The names this file reads as settings: ``settings.NAME``, ``getattr(settings, "NAME")``,
    ``os.environ.get("NAME")``, a bare ``NAME`` (the settings modules). Not a read: the table
    itself, base.py's bindings, and the names config/settings/ gives other defaults to."""
    if path in DECLARATIONS:
        return set()
    tree = ast.parse(path.read_text())
    bindings = base_bindings(tree).values() if path == BASE else ()
    skipped = {id(node) for binding in bindings for node in ast.walk(binding)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and path.parent != SETTINGS_DIR:
            found.add(node.value)
    return found


def test_the_reference_page_and_env_example_are_what_the_generator_writes():
    stale = [str(path.relative_to(BASE_DIR)) for path in reference.stale()]
    assert stale == [], f"{', '.join(stale)} differ from the table: run python -m config.settings.reference"


def test_env_example_lists_every_setting_with_its_default_and_no_other_seckill_name():
    text = (BASE_DIR / ".env.example").read_text()
    start = text.index(reference.BLOCK_START)
    end = text.index(reference.BLOCK_END)
    listed = dict(re.findall(r"^# ([A-Z][A-Z0-9_]*)=(.*)$", text[start:end], re.M))
    assert listed == {setting.name: reference.env_default(setting) for setting in registry.SETTINGS}
    outside = SECKILL_NAME.findall(text[:start] + text[end:])
    assert outside == [], "SECKILL_* names of .env.example outside the generated list"


def test_the_code_names_no_seckill_setting_the_table_does_not_declare():
    known = DECLARED | set(registry.FIXED) | set(HARNESS)
    undeclared = {
        f"{name} ({path.relative_to(BASE_DIR)})"
        for path in sources()
        for name in SECKILL_NAME.findall(path.read_text())
        if name not in known
    }
    assert undeclared == set(), "declare these in config/settings/registry.py (or drop them)"


def test_every_declared_setting_is_read_somewhere():
    read = set().union(*(reads(path) for path in sources()))
    assert DECLARED - read == set(), "declared in config/settings/registry.py, read by no code"


def test_the_harness_names_are_no_settings_of_the_table():
    assert DECLARED & set(HARNESS) == set()


def test_base_binds_every_setting_of_the_table_with_its_type():
    bindings = base_bindings()
    assert set(bindings) == DECLARED
    wrong = {
        name: ast.unparse(binding.annotation)
        for name, binding in bindings.items()
        if ast.unparse(binding.annotation) != PYTHON_TYPE[registry.BY_NAME[name].kind]
        or ast.unparse(binding.value.slice) != repr(name)
    }
    assert wrong == {}


def test_the_names_are_unique_and_every_group_has_settings():
    names = [setting.name for setting in registry.SETTINGS]
    assert len(names) == len(set(names))
    assert all(group.settings for group in registry.GROUPS)


@pytest.fixture
def clean_env(monkeypatch):
    """An environment that sets none of the table's settings."""
    for name in DECLARED:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def read(**refs) -> dict:
    return registry.settings_read(environ.Env(), project_dir=BASE_DIR, refs={"REDIS_URL": "redis://r:6379/0", **refs})


def test_the_defaults_are_of_their_kind_and_within_their_bounds(clean_env):
    values = read()
    assert values["SECKILL_REDIS_URL"] == "redis://r:6379/0"
    assert values["SECKILL_PUBLISH_DIR"] == BASE_DIR / "publish"
    for setting in registry.SETTINGS:
        if not isinstance(setting.default, registry.Ref):
            assert values[setting.name] == (
                BASE_DIR / str(setting.default) if setting.kind is registry.Kind.PATH else setting.default
            )
            assert type(values[setting.name]).__name__ in (PYTHON_TYPE[setting.kind], "PosixPath")


def test_the_environment_is_read_with_the_kind_of_each_setting(clean_env):
    clean_env.setenv("SECKILL_ORDER_BATCH_SIZE", "50")
    clean_env.setenv("SECKILL_TOKEN_AUTO_FILL", "False")
    clean_env.setenv("SECKILL_RATE_PER_IP", "100/5m")
    clean_env.setenv("SECKILL_PUBLISH_DIR", "/srv/pages")
    clean_env.setenv("SECKILL_REDIS_URL", "$REDIS_URL")  # django-environ's proxy, as .env.example writes it
    clean_env.setenv("REDIS_URL", "redis://elsewhere:6379/1")
    values = read()
    assert values["SECKILL_ORDER_BATCH_SIZE"] == 50
    assert values["SECKILL_TOKEN_AUTO_FILL"] is False
    assert values["SECKILL_RATE_PER_IP"] == "100/5m"
    assert values["SECKILL_PUBLISH_DIR"] == Path("/srv/pages")
    assert values["SECKILL_REDIS_URL"] == "redis://elsewhere:6379/1"


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SECKILL_SOLD_OUT_TTL", "2", "SECKILL_MEMORY_BOUND"),
        ("SECKILL_ROOM_STATUS_TTL", "1.5", "at most 1 s old"),
        ("SECKILL_RATE_PER_USER", "10/0s", '"10/s"'),
        ("SECKILL_AUTH_FAILURES_PER_IP", "30 per minute", 'or "off"'),
        ("SECKILL_ORDER_BATCH_SIZE", "0", "≥ 1"),
        ("SECKILL_ORDER_BATCH_SIZE", "many", "an integer"),
        ("SECKILL_REPLAY_INTERVAL", "0", "> 0"),
        ("SECKILL_DB_RESERVE_PERCENT", "120", "0 to 100"),
        ("SECKILL_TOKEN_FILTER_ERROR_RATE", "1", "between 0 and 1"),
        ("SECKILL_REDIS_CLUSTER", "ture", "true or false"),
    ],
)
def test_a_value_outside_its_bound_names_the_variable_and_the_bound(clean_env, name, value, says):
    clean_env.setenv(name, value)
    with pytest.raises(ImproperlyConfigured) as refused:
        read()
    assert name in str(refused.value) and says in str(refused.value)


def test_other_defaults_still_give_way_to_the_environment(clean_env):
    """What config/settings/test.py does: its defaults, unless the environment says."""
    clean_env.setenv("SECKILL_DUPLICATE_TTL", "1")
    values = registry.settings_read(
        environ.Env(),
        project_dir=BASE_DIR,
        defaults={"SECKILL_SOLD_OUT_TTL": 0.0, "SECKILL_DUPLICATE_TTL": 0.0},
        names=["SECKILL_SOLD_OUT_TTL", "SECKILL_DUPLICATE_TTL"],
    )
    assert values == {"SECKILL_SOLD_OUT_TTL": 0.0, "SECKILL_DUPLICATE_TTL": 1.0}


def test_rates_are_checked_as_an_activity_s_own_rates_are():
    from seckill.models import RATE_RE

    assert registry.RATE_RE.pattern == RATE_RE.pattern
