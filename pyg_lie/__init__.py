"""pyg_lie: equivariant attention over Lie groups for PyTorch Geometric."""
from __future__ import annotations

from . import groups  # noqa: F401
from ._lazy import lazy_getattr

__version__ = "0.1.0"

_LAZY = {"register_graphgym": "pyg_lie.graphgym", "enable_pyg_radius": "pyg_lie.interop.pyg",
         "pyg_radius": "pyg_lie.interop.pyg"}
__all__ = ["groups", "neighbors", "nn", "models", "datasets", "testing", "register_graphgym", "enable_pyg_radius",
           "pyg_radius", "__version__"]


def __getattr__(name: str):
    if name in ("neighbors", "nn", "models", "datasets", "vit", "testing", "ops", "interop"):
        import importlib
        return importlib.import_module(f"pyg_lie.{name}")
    return lazy_getattr(__name__, _LAZY)(name)
