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
from .._gather import select
from .._tracing import tracing
from ._autocast import float32_under_autocast
from ._sparse_ops import CSRStructure, _sddmm_op, _spmm_op, _transposed_spmm, csr_aggregate, csr_scores

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
            :class:`~pyg_lie.nn._sparse_ops.CSRStructure`'s ``crow``).

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
        return _softmax_op(score, dim)
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


# The dense softmax as a custom operator: traced under torch.compile with dynamic shapes,
# inductor fused it with the neighbouring reshapes into a scalar (unvectorised) backward loop
# parallel over the heads only, far slower than the static-shape kernels; called as an
# operator it runs aten's kernels in every case.
@torch.library.custom_op("pyg_lie::softmax", mutates_args=())
def _softmax_op(score: Tensor, dim: int) -> Tensor:
    return torch.softmax(score.contiguous(), dim=dim)  # contiguous in, contiguous out


@_softmax_op.register_fake
def _(score, dim):
    return score.new_empty(score.shape)


@torch.library.custom_op("pyg_lie::softmax_backward", mutates_args=())
def _softmax_backward_op(g: Tensor, w: Tensor, dim: int) -> Tensor:
    return torch.ops.aten._softmax_backward_data(g.contiguous(), w, dim, w.dtype)


@_softmax_backward_op.register_fake
def _(g, w, dim):
    return w.new_empty(w.shape)


def _softmax_setup(ctx, inputs, output) -> None:
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)


def _softmax_grad(ctx, g: Tensor):
    (w,) = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True: the same formula with differentiable ops
        return w * (g - (g * w).sum(ctx.dim, keepdim=True)), None
    return _softmax_backward_op(g, w, ctx.dim), None


_softmax_op.register_autograd(_softmax_grad, setup_context=_softmax_setup)
float32_under_autocast(_softmax_op, _softmax_backward_op)


# ------------------------------------------------------------ attention on CSR structures
def csr_edge_attention(s: CSRStructure, score: Tensor, v: Tensor, normalization: str = "softmax",
                       dropout: float = 0.0, training: bool = False) -> Tuple[Tensor, Tensor]:
    r"""Normalise heads-first scores over each target's incoming edges and aggregate values:

    .. math::
        w_{h,e} = \operatorname{norm}_{e \to i}(\mathrm{score}_{h,e}), \qquad
        \mathrm{out}_{i,h} = \sum_{e = (j \to i)} \operatorname{dropout}(w)_{h,e}\, v_{j,h}

    for ``score (H, E)`` in the sorted edge order of ``s`` and ``v (N, H, D)``, with the
    normalisation of :func:`edge_attention` (segment reductions along the sorted edges, a
    dense one where every target has the same in-degree). The attention layers compute their
    scores in their own ways and share this step. Returns ``(out (N, H D), w (H, E))``,
    ``w`` before dropout. On a bipartite structure ``v`` has the ``N_src`` source rows and the
    output the ``N_dst`` target rows.
    """
    num_targets = v.shape[0] if s.num_sources is None else s.num_nodes
    # score.t() leads: the weights keep the (H, E) memory order the sorted normalisation reduces along
    w = edge_attention(score.t(), s.row, num_targets, normalization=normalization, ptr=s.crow,
                       degree=s.degree, validate=False).t().contiguous()
    wd = F.dropout(w, p=dropout, training=True) if training and dropout > 0 else w
    return csr_aggregate(s, wd, v), w


def csr_softmax_attention(s: CSRStructure, q: Tensor, k: Tensor, v: Tensor, l: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Multi-head softmax attention on the target-sorted edges of ``s``:

    .. math::
        w_{h,e} = \operatorname{softmax}_{e \to i}\big(q_{i,h} \cdot k_{j,h} + l_{h,e}\big),
        \qquad \mathrm{out}_{i,h} = \sum_{e = (j \to i)} w_{h,e}\, v_{j,h}

    for ``q, k, v (N, H, D)`` and location scores ``l (H, E)`` in sorted edge order.
    Returns ``(out (N, H, D), w (H, E))``. This is the operator
    :func:`pyg_lie.ops.csr_softmax_attention` (on CPU one native kernel does the SDDMM, the
    softmax and the SpMM row by row, and its backward two passes; Triton kernels on CUDA),
    except for complete clouds (all pairs within equal-size clouds), whose scores are the
    blocks of batched matrix products, and under ``torch.compile`` and on bipartite structures
    (``k, v`` with the ``N_src`` source rows, ``q`` and the output the ``N_dst`` target rows),
    where the unfused operators (:func:`~._sparse_ops.csr_scores`, :func:`csr_edge_attention`)
    compute it.
    """
    if not tracing():  # (evaluating the sizes alone broke guards of dynamic shapes)
        s.check(q.shape[0], s.col.numel())
        if l.shape != (q.shape[1], s.col.numel()):
            raise ValueError(f"the location scores must have shape (H, E) = {(q.shape[1], s.col.numel())}, one "
                             f"per head and edge of the structure, got {tuple(l.shape)} (location features of "
                             f"another length, e.g. a rel_log that is not of these edges?)")
    if tracing() or (s.complete and not ops.serves(q)) or s.num_sources is not None:
        # complete clouds: batched dense products; traced: the unfused operators, which trace as they are;
        # bipartite: the fused kernels take one node set
        return _unfused_csr_attention(s, q, k, v, l)
    return ops.csr_softmax_attention(s, q, k, v, l)


def _unfused_csr_attention(s: CSRStructure, q: Tensor, k: Tensor, v: Tensor, l: Tensor) -> Tuple[Tensor, Tensor]:
    out, w = csr_edge_attention(s, csr_scores(s, q, k) + l, v)
    if s.num_sources is not None:
        return out.view(s.num_nodes, *v.shape[1:]), w
    return out.view(v.shape), w


def _csr_attention_grad(s: CSRStructure, q: Tensor, k: Tensor, v: Tensor, l: Tensor, g: Optional[Tensor],
                        gw: Optional[Tensor], needs) -> Tuple[Optional[Tensor], ...]:
    r"""Gradients ``(gq, gk, gv, gl)`` of :func:`csr_softmax_attention` (``None`` where not in
    ``needs``) for the output gradients ``g (N, H, D)`` and ``gw (H, E)`` (either ``None``),
    written with operators whose derivatives are closed-form (SDDMM, SpMM, gathers and a
    scatter softmax), so that a gradient of this gradient costs one more backward pass and
    never re-enters the attention or autograd:

    .. math::
        \bar w = \bar w_{in} + \mathrm{SDDMM}(g, v), \quad
        \bar s_e = w_e \big(\bar w_e - \textstyle\sum_{e' \to i} w_{e'} \bar w_{e'}\big), \quad
        \bar q = \mathrm{SpMM}(\bar s, k), \quad \bar k = \mathrm{SpMM}^T(\bar s, q), \quad
        \bar v = \mathrm{SpMM}^T(w, g), \quad \bar l = \bar s .
    """
    p = s.parts(True)
    N = q.shape[0]
    w = softmax((_sddmm_op(q, k, *p) + l).t(), s.row, num_nodes=N, dim=0).t()  # (H, E), recomputed
    gq = gk = gv = None
    gbar = gw
    if g is not None:
        gs = _sddmm_op(g, v, *p)
        gbar = gs if gbar is None else gbar + gs
        if needs[2]:
            gv = _transposed_spmm(w, g, p)
    if gbar is None:
        return None, None, None, None
    wg = w * gbar
    gscore = wg - w * select(scatter(wg, s.row, dim=1, dim_size=N, reduce="sum"), 1, s.row)
    if needs[0]:
        gq = _spmm_op(gscore, k, *p)
    if needs[1]:
        gk = _transposed_spmm(gscore, q, p)
    return gq, gk, gv, (gscore if needs[3] else None)
