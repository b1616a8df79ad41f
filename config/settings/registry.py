"""Every setting of the shop's own, declared once: name, type, default, meaning and bound.

The declarations sit by domain in config/settings/declared/ (the purchase, the waiting
room, the sale, payments, the stock engine, the web tier); what a setting is, and how it is
read and checked, in config/settings/schema.py. This module is the one table they make,
in the reference page's order.

config/settings/base.py reads them from the environment through ``settings_read`` (a value
outside its bound stops the start-up with ImproperlyConfigured naming the variable);
``python -m config.settings.reference`` writes docs/reference/settings.md and the settings
block of .env.example from this table, and tests/test_settings_reference.py fails when
either differs, or when the code reads a ``SECKILL_*`` name the table does not declare.

Django's own settings (``DJANGO_*``), the servers' URLs and the payment provider's settings
(their defaults differ between environments; production.py checks them) stay in base.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .declared import engine, payments, purchase, room, sale, web
from .schema import (
    AT_LEAST_ONE,
    FIXED,
    FRACTION,
    MEMORY,
    MEMORY_BOUND,
    NOT_NEGATIVE,
    PERCENT,
    POSITIVE,
    RATE_RE,
    Bound,
    Group,
    Kind,
    Ref,
    Setting,
)

__all__ = [
    "AT_LEAST_ONE",
    "BY_NAME",
    "FIXED",
    "FRACTION",
    "GROUPS",
    "MEMORY",
    "MEMORY_BOUND",
    "NOT_NEGATIVE",
    "PERCENT",
    "POSITIVE",
    "RATE_RE",
    "SETTINGS",
    "Bound",
    "Group",
    "Kind",
    "Ref",
    "Setting",
    "settings_read",
]

GROUPS: tuple[Group, ...] = (
    *purchase.GROUPS,
    *room.GROUPS,
    *sale.GROUPS,
    *payments.GROUPS,
    *engine.GROUPS,
    *web.GROUPS,
)
SETTINGS = tuple(setting for group in GROUPS for setting in group.settings)
BY_NAME = {setting.name: setting for setting in SETTINGS}


def settings_read(
    env: Any,
    *,
    project_dir: Path,
    refs: Mapping[str, object] | None = None,
    defaults: Mapping[str, object] | None = None,
    names: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The settings of the table (or only ``names``) from the environment, checked.

    ``defaults`` replaces the table's default of some (the test settings turn memories and
    limits off unless the environment says otherwise); ``refs`` gives the values the
    ``Ref`` defaults name."""
    defaults = defaults or {}
    chosen = SETTINGS if names is None else [BY_NAME[name] for name in names]
    return {
        setting.name: setting.read(
            env, default=defaults.get(setting.name, setting.default), project_dir=project_dir, refs=refs or {}
        )
        for setting in chosen
    }
