r"""G-pooling (Hutchinson et al., 2021, Appendix H): mean over lifted nodes.

.. math:: \bar f_b = \frac{1}{|G_f^b|} \sum_{g \in G_f^b} f(g)

per graph ``b``. A mean over a set is invariant to any permutation of that
set, in particular to ``g -> u g`` on the lifted nodes.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from .. import _checks as checks
from .._batch import num_graphs

__all__ = ["GroupPool"]


class GroupPool(torch.nn.Module):
    """Mean (or sum/max) of lifted-node features per graph.

    Shapes: ``x (M, C)``, ``batch (M,)`` or ``None`` -> ``(B, C)``.
    """

    def __init__(self, reduce: str = "mean"):
        super().__init__()
        if reduce not in ("mean", "sum", "max"):
            raise ValueError(f"reduce must be 'mean', 'sum' or 'max', got {reduce!r}")
        self.reduce = reduce

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, size: Optional[int] = None) -> Tensor:
        """Pool the lifted nodes of every graph.

        Args:
            x: ``(M, C)`` features of the ``M`` lifted nodes.
            batch: ``(M,)`` graph id ``>= 0`` of every lifted node (any order), or ``None``
                for one graph.
            size: the number of graphs ``B`` (a graph without nodes pools to 0); ``None``
                means ``batch.max() + 1``.

        Returns:
            ``(B, C)``: row ``b`` reduces the rows of ``x`` with ``batch == b``
            (``(1, C)`` when ``batch`` is ``None``).
        """
        if batch is None:
            return x.mean(0, keepdim=True) if self.reduce == "mean" else (
                x.sum(0, keepdim=True) if self.reduce == "sum" else x.max(0, keepdim=True)[0])
        checks.batch_vector(batch, x.size(0), "row of x", num_graphs=size)
        if size is None:
            size = num_graphs(batch)
        return scatter(x, batch, dim=0, dim_size=size, reduce=self.reduce)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(reduce={self.reduce!r})"
