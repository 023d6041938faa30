"""The number of graphs in a PyG ``batch`` vector."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["num_graphs"]


@torch.compiler.disable
def num_graphs(batch: Optional[Tensor]) -> int:
    """``batch.max() + 1`` for ``batch (N,)``; 0 when ``N = 0``, 1 for ``batch=None``.

    The count is data-dependent, so it is read eagerly: under ``torch.compile`` this is
    one graph break (as ``int(batch.max())`` would be) without dynamo's ``Tensor.item()``
    warning. Pass ``num_graphs=`` to the models to avoid it.
    """
    if batch is None:
        return 1
    return int(batch.max()) + 1 if batch.numel() else 0
