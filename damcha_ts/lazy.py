"""Package attributes that import their module on first use, so that importing a package stays
cheap (no torch, Lightning or pandas until a name that needs them is asked for)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) serving ``name`` from the module ``homes[name]``."""

    def __getattr__(name: str) -> Any:
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
