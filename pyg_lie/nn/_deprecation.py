"""Old argument spellings of the layers, kept for one release with a ``DeprecationWarning``.

The layers speak PyG's voice (``forward(x, edge_index, ...)``, ``edge_attr``,
``return_attention_weights``, ``heads``) and name one thing one way across siblings
(``rel_log`` for precomputed relative logs, ``group`` always given); the helpers here map
the old names onto the new ones.
"""
from __future__ import annotations

import warnings
from typing import Any

__all__ = ["renamed", "default_group"]


def renamed(owner: str, old: str, new: str, old_value: Any, new_value: Any, stacklevel: int = 3) -> Any:
    """The value of argument ``new``, taking the deprecated spelling ``old`` (with a
    ``DeprecationWarning``) when only that one is given; both given is a ``ValueError``."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise ValueError(f"{owner}: pass {new} only ({old} is its deprecated name), not both")
    warnings.warn(f"{owner}: {old}= is deprecated and will be removed in the next release; pass {new}= instead",
                  DeprecationWarning, stacklevel=stacklevel)
    return old_value


def default_group(owner: str, group: Any, stacklevel: int = 3) -> Any:
    """``group``, or ``"SE2"`` with a ``DeprecationWarning`` when it was left out: the attention
    layers take their group explicitly (as :class:`~pyg_lie.nn.LieAlgebraAttention` always has)."""
    if group is not None:
        return group
    warnings.warn(f"{owner}: leaving out group (default 'SE2') is deprecated; group will be required in the next "
                  f"release, as in LieAlgebraAttention: pass group='SE2' (or the group you mean)",
                  DeprecationWarning, stacklevel=stacklevel)
    return "SE2"
