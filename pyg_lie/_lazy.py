"""Lazy attribute loading for subpackages: optional dependencies stay optional."""
from __future__ import annotations

import importlib
from typing import Callable


def lazy_getattr(package: str, table: dict[str, str]) -> Callable[[str], object]:
    def __getattr__(name: str):
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
