"""The one edge-softmax attention core shared by every attention layer.

Scores live on edges ``(E, H)``; each target node ``i`` normalises over its
incoming edges ``j -> i``. Nodes with no incoming edge receive nothing (their
aggregate is zero), never NaN.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from .. import _checks as checks
from .. import ops
from .._tracing import tracing
from ..ops import CSRStructure, csr_softmax_attention

__all__ = ["edge_attention", "dense_edge_attention", "csr_edge_attention", "csr_softmax_attention"]


def edge_attention(
    score: Tensor,
    index: Tensor,
    num_nodes: Optional[int],
    normalization: str = "softmax",
    ptr: Optional[Tensor] = None,
    degree: int = 0,
    validate: bool = True,
) -> Tensor:
    """Normalise per-edge scores over each target's neighbourhood.

    Args:
        score: ``(E, H)`` (or ``(E,)``) unnormalised scores.
        index: ``(E,)`` target node of each edge (``edge_index[1]``).
        num_nodes: number of target nodes (``None``: from ``ptr``, else ``index.max() + 1``).
        normalization: ``"softmax"`` (``exp(s_ij) / sum_j exp(s_ij)``) or
            ``"mean"`` (constant normalisation ``s_ij / |N(i)|``, the
            LieTransformer's choice for Hamiltonian dynamics).
        ptr: ``(num_nodes + 1,)`` CSR pointer of the targets when the edges are sorted
            by target (``index`` non-decreasing); then the reductions are segment
            reductions instead of scatters (the operator :func:`pyg_lie.ops.segment_softmax`).
        degree: with ``ptr``, the common in-degree ``K > 0`` of every target: the
            normalisation is then a dense one over ``(H, num_nodes, K)`` (no scatter; a
            view when ``score`` is an ``(E, H)`` view of heads-first storage).
        validate: check the values of ``ptr`` (``ptr[0] = 0``, ``ptr[-1] = E``,
            non-decreasing; a ``ValueError`` naming ``ptr`` otherwise): one pass over the
            pointer and one device sync per call, left out under ``torch.compile``. Pass
            ``validate=False`` in a hot loop whose pointer is known to be right (a
            :class:`~pyg_lie.ops.CSRStructure`'s ``crow``).

    Returns:
        ``(E, H)`` attention weights.
    """
    if ptr is not None:
        if num_nodes is None:
            num_nodes = ptr.numel() - 1
        if ptr.dim() != 1 or ptr.numel() != num_nodes + 1:
            raise ValueError(f"ptr must be the CSR pointer of the targets, shape ({num_nodes + 1},) "
                             f"(num_nodes + 1), got {tuple(ptr.shape)}")
        if not tracing():  # (under torch.compile, evaluating the sizes alone broke dynamic-shape guards)
            E = score.shape[0] if score.dim() else 0
            if index.dim() != 1 or index.numel() != E:
                raise ValueError(f"index must hold the target of each of the {E} edges, got shape "
                                 f"{tuple(index.shape)}")
            ptr = checks.pointer("ptr", ptr, E, num_nodes, validate=validate)
            index = checks.plain_index("index", index)
            if degree > 0 and E != num_nodes * degree:
                raise ValueError(f"degree={degree} with {num_nodes} targets needs {num_nodes * degree} edges, "
                                 f"got {E}")
        if degree > 0 and score.dim() == 2:
            st = score.t().reshape(score.shape[1], -1, degree)  # (H, N, K)
            return dense_edge_attention(st, dim=-1, normalization=normalization).reshape(score.shape[1], -1).t()
        if score.numel() > 0:
            return _sorted_edge_attention(score, index, ptr, normalization)
    if normalization == "softmax":
        return softmax(score, index, num_nodes=num_nodes, dim=0)
    if normalization in ("mean", "constant"):
        ones = torch.ones_like(index, dtype=score.dtype)
        deg = scatter(ones, index, dim=0, dim_size=num_nodes, reduce="sum")
        inv = (1.0 / deg.clamp(min=1.0))[index]
        return score * inv.view(-1, *([1] * (score.dim() - 1)))
    raise ValueError(f"normalization must be 'softmax' or 'constant' (alias 'mean'), got {normalization!r}")


def dense_edge_attention(score: Tensor, dim: int = 1, normalization: str = "softmax") -> Tensor:
    """Dense-neighbourhood variant of :func:`edge_attention` (fused CSR layout).

    Used when targets are grouped by in-degree so that each group's incoming
    edges form a dense block: ``score`` has shape ``(n, K, ...)`` with the ``K``
    incoming edges of each of ``n`` targets along ``dim``. Same maths as
    :func:`edge_attention`, without a scatter.
    """
    if normalization == "softmax":
        return ops.dense_softmax(score, dim)
    if normalization in ("mean", "constant"):
        return score / max(score.shape[dim], 1)
    raise ValueError(f"normalization must be 'softmax' or 'constant' (alias 'mean'), got {normalization!r}")


def _sorted_edge_attention(score: Tensor, index: Tensor, ptr: Tensor, normalization: str) -> Tensor:
    """:func:`edge_attention` on target-sorted edges with CSR pointer ``ptr``; works in
    the memory order of ``score``: an ``(E, H)`` view of ``(H, E)`` storage (heads-first
    layout) is reduced along the contiguous axis, without a transposed copy."""
    shape = score.shape
    s = score.reshape(shape[0], -1)
    heads_first = s.shape[1] > 1 and s.t().is_contiguous()
    if heads_first:
        s = s.t()  # (H, E), contiguous
    elif not s.is_contiguous():
        s = s.contiguous()
    axis = 1 if heads_first else 0
    if normalization == "softmax":
        w = ops.segment_softmax(s, ptr, axis)
    elif normalization in ("mean", "constant"):
        inv = 1.0 / (ptr[1:] - ptr[:-1]).clamp(min=1).to(s.dtype)
        w = s * inv.index_select(0, index).unsqueeze(0 if heads_first else 1)
    else:
        raise ValueError(f"normalization must be 'softmax' or 'constant' (alias 'mean'), got {normalization!r}")
    return (w.t() if heads_first else w).reshape(shape)


# ------------------------------------------------------------ attention on CSR structures
def csr_edge_attention(s: CSRStructure, score: Tensor, v: Tensor, normalization: str = "softmax",
                       dropout: float = 0.0, training: bool = False) -> Tuple[Tensor, Tensor]:
    r"""Normalise heads-first scores over each target's incoming edges and aggregate values:

    .. math::
        w_{h,e} = \operatorname{norm}_{e \to i}(\mathrm{score}_{h,e}), \qquad
        \mathrm{out}_{i,h} = \sum_{e = (j \to i)} \operatorname{dropout}(w)_{h,e}\, v_{j,h}

    for ``score (H, E)`` in the sorted edge order of ``s`` and ``v (N, H, D)``, with the
    normalisation of :func:`edge_attention` (:func:`pyg_lie.ops.csr_softmax` for the softmax).
    The attention layers compute their scores in their own ways and share this step. Returns
    ``(out (N, H D), w (H, E))``, ``w`` before dropout. On a bipartite structure ``v`` has the
    ``N_src`` source rows and the output the ``N_dst`` target rows.

    Softmax attention whose scores are ``q . k`` plus per-edge terms is one step instead:
    :func:`csr_softmax_attention` (:func:`pyg_lie.ops.csr_softmax_attention`, re-exported
    here as the engine's entry point), which fuses scores, softmax and aggregation where a
    kernel takes the inputs.
    """
    if normalization == "softmax":
        w = ops.csr_softmax(s, score)
    elif normalization in ("mean", "constant"):
        num_targets = v.shape[0] if s.num_sources is None else s.num_nodes
        w = edge_attention(score.t(), s.row, num_targets, normalization=normalization, ptr=s.crow,
                           degree=s.degree, validate=False).t().contiguous()
    else:
        raise ValueError(f"normalization must be 'softmax' or 'constant' (alias 'mean'), got {normalization!r}")
    wd = F.dropout(w, p=dropout, training=True) if training and dropout > 0 else w
    return ops.csr_aggregate(s, wd, v), w
