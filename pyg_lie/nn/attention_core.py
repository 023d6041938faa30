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
from ..groups.base import _is_compiling
from . import _native
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
            reductions instead of scatters (see :class:`_SortedSoftmax`).
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
        if not _is_compiling():  # (under torch.compile, evaluating the sizes alone broke dynamic-shape guards)
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


class _SortedSoftmax(torch.autograd.Function):
    r"""Softmax over segments of target-sorted edges, ``score (E, H)`` or ``(H, E)``
    (edges along ``axis``), with the closed-form backward
    ``ds = w (g - sum_{j in N(i)} g_j w_j)``.

    Segment max and sums (``torch.segment_reduce`` on the CSR pointer) replace the
    scatters of the generic path, and the backward is three elementwise passes
    and one segment sum instead of autograd through five scatter/gather ops
    (about half the time forward + backward). The max shift keeps every ``exp`` at most 1 and every segment sum
    at least 1, so no NaN for finite scores. For float32 on CPU (outside ``torch.compile``)
    the native kernel of ``_native/segment_softmax.c`` does each pass in one task per
    segment, with the segment in L1 (several times faster than ``segment_reduce``). ``segment_reduce``
    has no double backward, so when a differentiable backward is asked for
    (``create_graph``) the gradient is recomputed from the scatter softmax under autograd
    instead.
    """

    @staticmethod
    def forward(ctx, score: Tensor, index: Tensor, ptr: Tensor, axis: int) -> Tensor:
        rows = _segment_rows(score, axis)
        w = _native.segment_softmax(rows, ptr) if rows is not None else None
        ctx.axis, ctx.native = axis, w is not None
        if w is not None:
            w = w.view_as(score)
            ctx.save_for_backward(score, w, index, ptr)
            return w
        offsets = ptr if axis == 0 else ptr.expand(score.shape[0], ptr.numel()).contiguous()
        m = torch.segment_reduce(score, "max", offsets=offsets, axis=axis, unsafe=True)
        e = (score - select(m, axis, index)).exp_()
        z = torch.segment_reduce(e, "sum", offsets=offsets, axis=axis, unsafe=True)
        w = e.div_(select(z, axis, index))
        ctx.save_for_backward(score, w, index, offsets)
        return w

    @staticmethod
    def backward(ctx, g: Tensor):
        score, w, index, offsets = ctx.saved_tensors  # offsets: ptr on the native path
        axis = ctx.axis
        if torch.is_grad_enabled():  # create_graph=True: differentiable recomputation
            n = offsets.shape[-1] - 1
            w = softmax(score, index, num_nodes=n, dim=axis)
            t = scatter(g * w, index, dim=axis, dim_size=n, reduce="sum")
            return w * (g - select(t, axis, index)), None, None, None
        if ctx.native:
            rows = _segment_rows(w, axis)
            return _native.segment_softmax_backward(_segment_rows(g.contiguous(), axis), rows,
                                                    offsets).view_as(w), None, None, None
        gw = g * w
        t = torch.segment_reduce(gw, "sum", offsets=offsets, axis=axis, unsafe=True)
        return gw.sub_(w * select(t, axis, index)), None, None, None


def _segment_rows(t: Tensor, axis: int) -> Optional[Tensor]:
    """``t`` as the ``(R, E)`` rows of :func:`_native.segment_softmax` (edges along ``axis``, a
    contiguous one), or ``None`` where the native kernel does not apply (another dtype or
    device, under ``torch.compile``, several columns along axis 0, no native kernels)."""
    if _is_compiling() or not (axis == 1 or t.shape[1] == 1) or not _native.segment_softmax_supported(t):
        return None
    return t if axis == 1 else t.view(1, -1)


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
        w = _SortedSoftmax.apply(s, index, ptr, axis)
    elif normalization in ("mean", "constant"):
        inv = 1.0 / (ptr[1:] - ptr[:-1]).clamp(min=1).to(s.dtype)
        w = s * inv.index_select(0, index).unsqueeze(0 if heads_first else 1)
    else:
        raise ValueError(f"normalization must be 'softmax' or 'constant' (alias 'mean'), got {normalization!r}")
    return (w.t() if heads_first else w).reshape(shape)


# The dense softmax as a custom operator: traced under torch.compile with dynamic shapes,
# inductor fused it with the neighbouring reshapes into a scalar (unvectorised) backward loop
# parallel over the heads only (SE(2), 4 lifts, 32 x 32 points: 140 ms per block against
# 1.3 ms static); called as an operator it runs aten's kernels in every case.
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
    ``w`` before dropout.
    """
    # score.t() leads: the weights keep the (H, E) memory order the sorted normalisation reduces along
    w = edge_attention(score.t(), s.row, v.shape[0], normalization=normalization, ptr=s.crow,
                       degree=s.degree, validate=False).t().contiguous()
    wd = F.dropout(w, p=dropout, training=True) if training and dropout > 0 else w
    return csr_aggregate(s, wd, v), w


def csr_softmax_attention(s: CSRStructure, q: Tensor, k: Tensor, v: Tensor, l: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Multi-head softmax attention on the target-sorted edges of ``s``:

    .. math::
        w_{h,e} = \operatorname{softmax}_{e \to i}\big(q_{i,h} \cdot k_{j,h} + l_{h,e}\big),
        \qquad \mathrm{out}_{i,h} = \sum_{e = (j \to i)} w_{h,e}\, v_{j,h}

    for ``q, k, v (N, H, D)`` and location scores ``l (H, E)`` in sorted edge order.
    Returns ``(out (N, H, D), w (H, E))``. On CPU in float32 with ``D`` a multiple of 8
    (outside ``torch.compile``, graphs that are not complete clouds) one native kernel
    (``csr_attention_f32`` of ``_native/csr_products.c``) does the SDDMM, the softmax and
    the SpMM row by row, and its backward two passes, with the same arithmetic in the same
    order as the unfused path, so the results agree to the bit (where in-degrees differ;
    with a uniform in-degree the unfused path's dense softmax agrees to rounding).
    Elsewhere, and for gradients of gradients, the unfused operators
    (:func:`~._sparse_ops.csr_scores`, :func:`csr_edge_attention`) compute it.

    On CUDA, and on any device when a backend is selected with
    :func:`pyg_lie.ops.set_backend` (or ``PYG_LIE_BACKEND``), the operator
    :func:`pyg_lie.ops.csr_softmax_attention` runs instead (Triton kernels on CUDA).
    """
    if not _is_compiling():  # (evaluating the sizes alone broke guards of dynamic shapes)
        s.check(q.shape[0], s.col.numel())
        if l.shape != (q.shape[1], s.col.numel()):
            raise ValueError(f"the location scores must have shape (H, E) = {(q.shape[1], s.col.numel())}, one "
                             f"per head and edge of the structure, got {tuple(l.shape)} (location features of "
                             f"another length, e.g. a rel_log that is not of these edges?)")
    if ops.serves(q):
        return ops.csr_softmax_attention(s, q, k, v, l)
    if not _is_compiling() and not s.complete and _native.csr_attention_supported(q, k, v, l):
        return _CSRSoftmaxAttention.apply(q, k, v, l, s)
    return _unfused_csr_attention(s, q, k, v, l)


def _unfused_csr_attention(s: CSRStructure, q: Tensor, k: Tensor, v: Tensor, l: Tensor) -> Tuple[Tensor, Tensor]:
    out, w = csr_edge_attention(s, csr_scores(s, q, k) + l, v)
    return out.view(v.shape), w


class _CSRSoftmaxAttention(torch.autograd.Function):
    """:func:`csr_softmax_attention` by the native kernels; the backward recomputes nothing
    (it reads the forward's weights). When a differentiable gradient is asked for
    (``create_graph``), :func:`_csr_attention_grad` writes the same gradient with the
    differentiable SDDMM / SpMM operators instead."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, l: Tensor, s: CSRStructure):
        res = _native.csr_attention(q, k, v, l, s.crow, s.col)
        if res is None:
            raise RuntimeError("csr_softmax_attention: the structure's row pointer does not match its edges")
        out, w = res
        ctx.s = s
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, l, w)
        return out, w

    @staticmethod
    def backward(ctx, g: Optional[Tensor], gw: Optional[Tensor]):
        q, k, v, l, w = ctx.saved_tensors
        s = ctx.s
        if g is None and gw is None:
            return None, None, None, None, None
        if torch.is_grad_enabled():  # create_graph=True: the closed form with differentiable ops
            return (*_csr_attention_grad(s, q, k, v, l, g, gw, ctx.needs_input_grad[:4]), None)
        _, _, crow_t, col_t, perm_t, _ = s.parts(True)
        if g is None:
            g = torch.zeros_like(q)
        gq, gk, gv, gl = _native.csr_attention_backward(q, k, v, w, g, gw, s.crow, s.col, crow_t, col_t, perm_t)
        return gq, gk, gv, gl, None


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
