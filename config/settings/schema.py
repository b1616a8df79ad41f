"""What a setting of the shop's own is: its kind, default, meaning and bound, and how its
value is read from the environment and checked. The settings themselves are declared in
config/settings/declared/ and gathered by config/settings/registry.py."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

# Every answer a web process gives from its own memory describes a moment at most this long
# ago (docs/API.md: a refusal is true at some moment of its request, less this bound). A
# promise of the API, not a knob: exported as the setting SECKILL_MEMORY_BOUND, never read
# from the environment.
MEMORY_BOUND = 1.0
FIXED = {"SECKILL_MEMORY_BOUND": MEMORY_BOUND}

# The form seckill.models.validate_rate accepts (an activity's own rates in admin; a test
# holds the two the same): at least one request per window, a window of at least one period.
RATE_RE = re.compile(r"^0*[1-9]\d*/(0*[1-9]\d*)?[smhd]\Z")
_TRUE = frozenset({"true", "on", "ok", "y", "yes", "1"})  # what django-environ reads as true
_FALSE = frozenset({"false", "off", "n", "no", "0", ""})


class Kind(enum.Enum):
    """What a value is, as the reference page names it."""

    STR = "string"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    PATH = "path"
    RATE = "rate"


def _rate(raw: str) -> str:
    if raw and raw != "off" and not RATE_RE.match(raw):
        raise ValueError(raw)
    return raw


def _bool(raw: str) -> bool:
    if raw.lower() not in _TRUE | _FALSE:
        raise ValueError(raw)
    return raw.lower() in _TRUE


_PARSE: dict[Kind, Callable[[str], Any]] = {
    Kind.STR: str,
    Kind.BOOL: _bool,
    Kind.INT: int,
    Kind.FLOAT: float,
    Kind.PATH: Path,
    Kind.RATE: _rate,
}
_FORM = {
    Kind.STR: "a string",
    Kind.BOOL: "true or false",
    Kind.INT: "an integer",
    Kind.FLOAT: "a number",
    Kind.PATH: "a path",
    Kind.RATE: 'a rate such as "10/s", "600/m" or "100/5m", or "off"',
}


@dataclass(frozen=True)
class Bound:
    """What a number must be, in words and as a test."""

    text: str
    holds: Callable[[float], bool]
    why: str = ""


POSITIVE = Bound("> 0", lambda value: value > 0)
AT_LEAST_ONE = Bound("≥ 1", lambda value: value >= 1)
NOT_NEGATIVE = Bound("≥ 0", lambda value: value >= 0)
PERCENT = Bound("0 to 100", lambda value: 0 <= value <= 100)
FRACTION = Bound("between 0 and 1", lambda value: 0 < value < 1)
MEMORY = Bound(
    f"0 to {MEMORY_BOUND:g} (SECKILL_MEMORY_BOUND)",
    lambda value: 0 <= value <= MEMORY_BOUND,
    why=f"a web process's memory may be at most {MEMORY_BOUND:g} s old (docs/API.md), "
    "or a refusal could describe a sale long past",
)


@dataclass(frozen=True)
class Ref:
    """A default that is another setting's value (SECKILL_REDIS_URL: REDIS_URL's)."""

    name: str


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    default: object
    meaning: str
    bound: Bound | None = None

    def read(self, env: Any, *, default: object, project_dir: Path, refs: Mapping[str, object]) -> Any:
        """This setting's value from the environment (django-environ's ``env``: .env files
        and ``$OTHER`` proxies), else ``default``; ImproperlyConfigured when it is not of its
        kind or outside its bound."""
        if isinstance(default, Ref):
            default = refs[default.name]
        raw = env.str(self.name, default=None)
        value: Any
        if raw is None:
            value = default
        else:
            try:
                value = _PARSE[self.kind](raw.strip())
            except ValueError:
                raise ImproperlyConfigured(f"{self.name}={raw!r} is not {_FORM[self.kind]}.") from None
        if self.kind is Kind.PATH:
            value = project_dir / value  # a relative path is the project directory's
        if self.bound is not None and not self.bound.holds(value):
            why = f": {self.bound.why}" if self.bound.why else ""
            raise ImproperlyConfigured(f"{self.name} is {value!r}; it must be {self.bound.text}{why}.")
        return value


@dataclass(frozen=True)
class Group:
    """Settings that belong together: one table of the reference page."""

    title: str
    about: str
    settings: tuple[Setting, ...]
