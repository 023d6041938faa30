"""pyg_lie: equivariant attention over Lie groups for PyTorch Geometric."""
from __future__ import annotations

__version__ = "0.1.0"

from . import groups  # noqa: F401

__all__ = ["groups", "__version__"]
