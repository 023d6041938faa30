"""The one edge-softmax attention core shared by every attention layer.

Scores live on edges ``(E, H)``; each target node ``i`` normalises over its
incoming edges ``j -> i``. Nodes with no incoming edge receive nothing (their
aggregate is zero), never NaN.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter, softmax


def edge_attention(
    score: Tensor,
    index: Tensor,
    num_nodes: int,
    normalization: str = "softmax",
    ptr: Optional[Tensor] = None,
) -> Tensor:
    """Normalise per-edge scores over each target's neighbourhood.

    Args:
        score: ``(E, H)`` (or ``(E,)``) unnormalised scores.
        index: ``(E,)`` target node of each edge (``edge_index[1]``).
        num_nodes: number of target nodes.
        normalization: ``"softmax"`` (``exp(s_ij) / sum_j exp(s_ij)``) or
            ``"mean"`` (constant normalisation ``s_ij / |N(i)|``, the
            LieTransformer's choice for Hamiltonian dynamics).
        ptr: optional CSR pointer of targets when edges are sorted by target.

    Returns:
        ``(E, H)`` attention weights.
    """
    if normalization == "softmax":
        return softmax(score, index, ptr=ptr, num_nodes=num_nodes, dim=0)
    if normalization in ("mean", "constant"):
        ones = torch.ones_like(index, dtype=score.dtype)
        deg = scatter(ones, index, dim=0, dim_size=num_nodes, reduce="sum")
        inv = (1.0 / deg.clamp(min=1.0))[index]
        return score * inv.view(-1, *([1] * (score.dim() - 1)))
    raise ValueError(f"normalization must be 'softmax' or 'mean', got {normalization!r}")


def dense_edge_attention(score: Tensor, dim: int = 1, normalization: str = "softmax") -> Tensor:
    """Dense-neighbourhood variant of :func:`edge_attention` (fused CSR layout).

    Used when targets are grouped by in-degree so that each group's incoming
    edges form a dense block: ``score`` has shape ``(n, K, ...)`` with the ``K``
    incoming edges of each of ``n`` targets along ``dim``. Same maths as
    :func:`edge_attention`, without a scatter.
    """
    if normalization == "softmax":
        return torch.softmax(score, dim=dim)
    if normalization in ("mean", "constant"):
        return score / max(score.shape[dim], 1)
    raise ValueError(f"normalization must be 'softmax' or 'mean', got {normalization!r}")
