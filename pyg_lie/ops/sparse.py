r"""Products and the softmax on target-sorted CSR edges, multi-head.

* ``torch.ops.pyg_lie.csr_sddmm(A, B, crow, col, ...)``: ``(H, E)`` scores
  ``s_{h,e} = A_{i,h} \cdot B_{j,h}`` for the edges ``e = (j -> i)``;
* ``torch.ops.pyg_lie.csr_spmm(w, V, crow, col, ...)``: ``(N, H, D)`` sums
  ``out_{i,h} = \sum_{e = (j -> i)} w_{h,e} V_{j,h}``;
* ``torch.ops.pyg_lie.csr_spmm_permuted(w, wperm, V, crow, col)``: SpMM whose edge ``e`` reads
  the weights ``w[:, wperm[e]]`` (no autograd: the backward passes' transposed products);
* ``torch.ops.pyg_lie.segment_softmax(s, ptr, dim)``: the softmax of ``s (R, E)`` (``dim=1``)
  or ``s (E, C)`` (``dim=0``) over the segments ``ptr[i] .. ptr[i + 1] - 1`` of the edges, and
  its backward ``segment_softmax_backward``.

The CSR pattern is ``crow (N + 1,)`` over targets and ``col (E,)`` sources; the optional
``crow_t, col_t, perm_t, iperm_t`` are its transpose (rows = sources) and the permutations
between the two edge orders, which the backward passes need (see
:meth:`pyg_lie.ops.CSRStructure.parts`). SDDMM and SpMM differentiate into each
other, so their gradients of any order are these operators again; the softmax's
differentiable backward is written in torch scatters. On CPU (float32 and float64 products,
float32 softmax) the native C kernels run, elsewhere the composite implementation, which
defines the values.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from .._gather import select
from . import _backend
from ._common import (check_csr_values, check_permutation, check_transpose, eager_function, float32_under_autocast,
                      float_tensor, index_tensor, rows_of, same_device, same_dtype, validating)

__all__ = ["sddmm", "spmm", "spmm_permuted", "transposed_spmm", "segment_softmax", "dense_softmax", "composite_sddmm",
           "composite_spmm", "composite_segment_softmax"]


def _no_triton() -> bool:
    return False


def _native_products_ok(*ts: Tensor) -> bool:
    nat = _backend._native_module()
    return nat.available() and nat.csr_supported(*ts)


# ------------------------------------------------------------------------- composite reference
def composite_sddmm(A: Tensor, B: Tensor, crow: Tensor, col: Tensor) -> Tensor:
    """The reference semantics of :func:`sddmm` in differentiable torch operations."""
    row = rows_of(crow, col.numel())
    return (A.index_select(0, row) * B.index_select(0, col.long())).sum(-1).t()


def composite_spmm(w: Tensor, V: Tensor, crow: Tensor, col: Tensor) -> Tensor:
    """The reference semantics of :func:`spmm` in differentiable torch operations."""
    row = rows_of(crow, col.numel())
    out = V.new_zeros(crow.numel() - 1, *V.shape[1:])
    return out.index_add(0, row, w.t().unsqueeze(-1) * V.index_select(0, col.long()))


# ------------------------------------------------------------------------------------ operators
@torch.library.custom_op("pyg_lie::csr_sddmm", mutates_args=())
def _sddmm_op(A: Tensor, B: Tensor, crow: Tensor, col: Tensor, crow_t: Optional[Tensor],
              col_t: Optional[Tensor], perm_t: Optional[Tensor], iperm_t: Optional[Tensor]) -> Tensor:
    which = _backend.choose("csr_sddmm", A.device, lambda: _native_products_ok(A, B), _no_triton)
    if which == "native":
        return _backend._native_module().csr_sddmm(A, B, crow, col)
    return composite_sddmm(A, B, crow, col).contiguous()


@_sddmm_op.register_fake
def _(A, B, crow, col, crow_t, col_t, perm_t, iperm_t):
    return A.new_empty(A.shape[1], col.shape[0])


@torch.library.custom_op("pyg_lie::csr_spmm", mutates_args=())
def _spmm_op(w: Tensor, V: Tensor, crow: Tensor, col: Tensor, crow_t: Optional[Tensor],
             col_t: Optional[Tensor], perm_t: Optional[Tensor], iperm_t: Optional[Tensor]) -> Tensor:
    which = _backend.choose("csr_spmm", V.device, lambda: _native_products_ok(w, V), _no_triton)
    if which == "native":
        return _backend._native_module().csr_spmm(w, V, crow, col)
    return composite_spmm(w, V, crow, col)


@_spmm_op.register_fake
def _(w, V, crow, col, crow_t, col_t, perm_t, iperm_t):
    return V.new_empty(crow.shape[0] - 1, V.shape[1], V.shape[2])


@torch.library.custom_op("pyg_lie::csr_spmm_permuted", mutates_args=())
def _spmm_permuted_op(w: Tensor, wperm: Tensor, V: Tensor, crow_t: Tensor, col_t: Tensor) -> Tensor:
    which = _backend.choose("csr_spmm_permuted", V.device, lambda: _native_products_ok(w, V), _no_triton)
    if which == "native":  # the kernel reads the weights through the permutation: no gathered copy
        return _backend._native_module().csr_spmm(w, V, crow_t, col_t, wperm=wperm)
    return composite_spmm(select(w, 1, wperm), V, crow_t, col_t)


@_spmm_permuted_op.register_fake
def _(w, wperm, V, crow_t, col_t):
    return V.new_empty(crow_t.shape[0] - 1, V.shape[1], V.shape[2])


def _save(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _transposed(p):
    crow, col, crow_t, col_t, perm_t, iperm_t = p
    if perm_t is None:
        raise RuntimeError("the transposed CSR pattern was not given; call the products through "
                           "pyg_lie.ops.csr_sddmm / csr_spmm (or pass crow_t, col_t, perm_t, iperm_t)")
    return (crow_t, col_t, crow, col, iperm_t, perm_t), perm_t


def transposed_spmm(w: Tensor, V: Tensor, p) -> Tensor:
    """SpMM on the transposed pattern of ``p = (crow, col, crow_t, col_t, perm_t, iperm_t)``
    with weights ``w (H, E)`` in ``p``'s edge order (rows = sources)."""
    pt, perm_t = _transposed(p)
    if not torch.is_grad_enabled():
        return _spmm_permuted_op(w, perm_t, V, pt[0], pt[1])
    return _spmm_op(select(w, 1, perm_t), V, *pt)


def _sddmm_backward(ctx, g: Tensor):
    A, B, *p = ctx.saved_tensors
    gA = gB = None
    if ctx.needs_input_grad[0]:
        gA = _spmm_op(g, B, *p)
    if ctx.needs_input_grad[1]:
        gB = transposed_spmm(g, A, p)
    return gA, gB, None, None, None, None, None, None


def _spmm_backward(ctx, g: Tensor):
    w, V, *p = ctx.saved_tensors
    gw = gV = None
    if ctx.needs_input_grad[0]:
        gw = _sddmm_op(g, V, *p)
    if ctx.needs_input_grad[1]:
        gV = transposed_spmm(w, g, p)
    return gw, gV, None, None, None, None, None, None


_sddmm_op.register_autograd(_sddmm_backward, setup_context=_save)
_spmm_op.register_autograd(_spmm_backward, setup_context=_save)
float32_under_autocast(_sddmm_op, _spmm_op, _spmm_permuted_op)


def _pattern(crow, col, num_sources: int, validate: Optional[bool], *ts: Tensor):
    """``crow``, ``col`` as int index tensors, with ``validate`` (see
    :func:`~pyg_lie.ops._common.validating`) checked to be a CSR pattern of sources in
    ``[0, num_sources)``: a row pointer from 0 to ``E``, non-decreasing."""
    crow, col = index_tensor("crow", crow), index_tensor("col", col)
    if crow.numel() < 1:
        raise ValueError("crow must be a CSR row pointer with at least one entry (num_rows + 1)")
    same_device(crow=crow, col=col, **{f"operand{i}": t for i, t in enumerate(ts)})
    checked = validating(validate, crow, col)
    if checked:
        check_csr_values(crow, col, num_sources)
    return crow, col, checked


def sddmm(A: Tensor, B: Tensor, crow: Tensor, col: Tensor, crow_t: Optional[Tensor] = None,
          col_t: Optional[Tensor] = None, perm_t: Optional[Tensor] = None,
          iperm_t: Optional[Tensor] = None, *, validate: Optional[bool] = None) -> Tensor:
    """``(H, E)`` scores ``A[i, h] . B[j, h]`` of the CSR edges ``j -> i`` for ``A (N, H, D)``,
    ``B (M, H, D)``; a gradient of ``B`` needs the transposed pattern (see the module doc).
    ``validate``: check the values of the pattern (a row pointer from 0 to ``E``, indices in
    range) before any kernel reads through it; ``None`` (default) checks CPU tensors (on a GPU
    the check costs a device synchronisation)."""
    A, B = float_tensor("A", A, 3), float_tensor("B", B, 3)
    same_dtype(A=A, B=B)
    if A.shape[1:] != B.shape[1:]:
        raise ValueError(f"A (N, H, D) and B (M, H, D) must share (H, D), got {tuple(A.shape)} and {tuple(B.shape)}")
    crow, col, checked = _pattern(crow, col, B.shape[0], validate, A, B)
    if crow.numel() != A.shape[0] + 1:
        raise ValueError(f"crow must have one entry more than A has rows ({A.shape[0] + 1}), got {crow.numel()}")
    t = check_transpose(crow_t, col_t, perm_t, iperm_t, A.shape[0], B.shape[0], col.numel(), checked)
    return _sddmm_op(A, B, crow, col, *t)


def spmm(w: Tensor, V: Tensor, crow: Tensor, col: Tensor, crow_t: Optional[Tensor] = None,
         col_t: Optional[Tensor] = None, perm_t: Optional[Tensor] = None,
         iperm_t: Optional[Tensor] = None, *, validate: Optional[bool] = None) -> Tensor:
    """``(N, H, D)`` sums ``sum_{j -> i} w[h, e] V[j, h]`` for ``w (H, E)``, ``V (M, H, D)``; a
    gradient of ``V`` needs the transposed pattern (see the module doc). ``validate`` as in
    :func:`sddmm`."""
    w, V = float_tensor("w", w, 2), float_tensor("V", V, 3)
    same_dtype(w=w, V=V)
    crow, col, checked = _pattern(crow, col, V.shape[0], validate, w, V)
    if w.shape != (V.shape[1], col.numel()):
        raise ValueError(f"w must be (H, E) = {(V.shape[1], col.numel())} (the heads of V, the edges of col), got "
                         f"{tuple(w.shape)}")
    t = check_transpose(crow_t, col_t, perm_t, iperm_t, crow.numel() - 1, V.shape[0], col.numel(), checked)
    return _spmm_op(w, V, crow, col, *t)


def spmm_permuted(w: Tensor, wperm: Tensor, V: Tensor, crow: Tensor, col: Tensor, *,
                  validate: Optional[bool] = None) -> Tensor:
    """:func:`spmm` whose edge ``e`` takes the weights ``w[:, wperm[e]]``; no gradient.
    ``validate`` as in :func:`sddmm` (``wperm`` too: entries in ``[0, E)``)."""
    w, V = float_tensor("w", w, 2), float_tensor("V", V, 3)
    same_dtype(w=w, V=V)
    crow, col, checked = _pattern(crow, col, V.shape[0], validate, w, V)
    wperm = index_tensor("wperm", wperm)
    same_device(w=w, wperm=wperm)
    if w.shape != (V.shape[1], col.numel()) or wperm.numel() != col.numel():
        raise ValueError(f"w must be (H, E) = {(V.shape[1], col.numel())} and wperm ({col.numel()},), got "
                         f"{tuple(w.shape)} and {tuple(wperm.shape)}")
    if checked:
        check_permutation("wperm", wperm, col.numel())
    return _spmm_permuted_op(w, wperm, V, crow, col)


# ------------------------------------------------------------------------------ segment softmax
def composite_segment_softmax(s: Tensor, ptr: Tensor, dim: int) -> Tensor:
    """The reference semantics of :func:`segment_softmax`: shift by the segment maximum, then
    ``exp`` over the segment sum, with torch's segment reductions (PyG's softmax with ``ptr``
    computes the same, but along a dimension other than 0 only with torch-scatter installed)."""
    index = rows_of(ptr, s.shape[dim])
    offsets = ptr if dim == 0 else ptr.expand(s.shape[0], ptr.numel()).contiguous()
    m = torch.segment_reduce(s, "max", offsets=offsets, axis=dim, unsafe=True)
    e = (s - select(m, dim, index)).exp_()
    z = torch.segment_reduce(e, "sum", offsets=offsets, axis=dim, unsafe=True)
    return e.div_(select(z, dim, index))


def _segment_rows(t: Tensor, dim: int) -> Optional[Tensor]:
    """``t`` as the ``(R, E)`` rows the native kernel reads (segments along a contiguous axis)."""
    if dim == 1:
        return t
    return t.view(1, -1) if t.shape[1] == 1 else None


def _native_softmax_ok(dim: int, *ts: Tensor) -> bool:
    nat = _backend._native_module()
    return all(_segment_rows(t, dim) is not None for t in ts) and nat.available() \
        and nat.segment_softmax_supported(*ts)


def _cpu_pointer(ptr: Tensor, num_items: int) -> None:
    """CPU pointers are checked in the operator itself (no device sync there), so that a
    direct ``torch.ops.pyg_lie`` call or a compiled graph never hands a bad one to
    ``segment_reduce(unsafe=True)`` or the native kernel."""
    if ptr.device.type == "cpu":
        from .._checks import pointer_values
        if ptr.numel() < 1:
            raise ValueError("ptr must be a CSR pointer with at least one entry (num_segments + 1)")
        pointer_values("ptr", ptr, num_items)


def _segment_softmax_impl(s: Tensor, ptr: Tensor, dim: int) -> Tensor:
    _cpu_pointer(ptr, s.shape[dim])
    s = s.contiguous()
    which = _backend.choose("segment_softmax", s.device, lambda: _native_softmax_ok(dim, s), _no_triton)
    if which == "native":
        w = _backend._native_module().segment_softmax(_segment_rows(s, dim), ptr)
        if w is None:
            raise ValueError(f"ptr must be a CSR pointer of the {s.shape[dim]} edges: non-decreasing from 0")
        return w.view_as(s)
    return composite_segment_softmax(s, ptr, dim).contiguous()


_segment_softmax_op = torch.library.custom_op("pyg_lie::segment_softmax", _segment_softmax_impl, mutates_args=())


@_segment_softmax_op.register_fake
def _(s, ptr, dim):
    return s.new_empty(s.shape)


def _segment_softmax_backward_impl(g: Tensor, w: Tensor, ptr: Tensor, dim: int) -> Tensor:
    _cpu_pointer(ptr, w.shape[dim])
    g, w = g.contiguous(), w.contiguous()
    which = _backend.choose("segment_softmax_backward", w.device, lambda: _native_softmax_ok(dim, g, w), _no_triton)
    if which == "native":
        out = _backend._native_module().segment_softmax_backward(_segment_rows(g, dim), _segment_rows(w, dim), ptr)
        if out is None:
            raise ValueError(f"ptr must be a CSR pointer of the {w.shape[dim]} edges: non-decreasing from 0")
        return out.view_as(w)
    gw = g * w
    offsets = ptr if dim == 0 else ptr.expand(w.shape[0], ptr.numel()).contiguous()
    t = torch.segment_reduce(gw, "sum", offsets=offsets, axis=dim, unsafe=True)
    return gw.sub_(w * select(t, dim, rows_of(ptr, w.shape[dim])))


_segment_softmax_backward_op = torch.library.custom_op("pyg_lie::segment_softmax_backward",
                                                     _segment_softmax_backward_impl, mutates_args=())


@_segment_softmax_backward_op.register_fake
def _(g, w, ptr, dim):
    return w.new_empty(w.shape)


def _softmax_setup(ctx, inputs, output) -> None:
    s, ptr, ctx.dim = inputs
    ctx.save_for_backward(s, ptr, output)


def _softmax_backward(ctx, g: Tensor):
    s, ptr, w = ctx.saved_tensors
    dim = ctx.dim
    if torch.is_grad_enabled():  # create_graph=True: scatters, differentiable to any order
        n = ptr.numel() - 1
        index = rows_of(ptr, s.shape[dim])
        w = softmax(s, index, num_nodes=n, dim=dim)
        t = scatter(g * w, index, dim=dim, dim_size=n, reduce="sum")
        return w * (g - select(t, dim, index)), None, None
    return _backend.call(_segment_softmax_backward_op, _segment_softmax_backward_impl, g, w, ptr, dim), None, None


_segment_softmax_op.register_autograd(_softmax_backward, setup_context=_softmax_setup)
float32_under_autocast(_segment_softmax_op, _segment_softmax_backward_op)


_SegmentSoftmax = eager_function("_SegmentSoftmax", _segment_softmax_impl, _softmax_setup, _softmax_backward)


def segment_softmax(s: Tensor, ptr: Tensor, dim: int = 1, *, validate: Optional[bool] = None) -> Tensor:
    """Softmax of the 2-D ``s`` over the segments ``ptr[i] .. ptr[i + 1] - 1`` along ``dim``
    (``s (R, E)`` with ``dim=1``: every row separately; ``s (E, C)`` with ``dim=0``: every
    column separately). ``ptr (N + 1,)`` is a CSR pointer from 0 to ``E``, non-decreasing:
    checked on CPU whatever the dtype (by the operator itself, ``torch.ops.pyg_lie`` calls
    included); on a GPU only with ``validate=True`` (the check costs a device
    synchronisation: pass it for pointers of unknown origin). A
    segment whose largest score is ``-inf`` gives NaN, as torch's softmax does. Differentiable,
    twice."""
    from .._checks import pointer_values
    if not isinstance(s, Tensor) or s.dim() != 2:
        raise ValueError(f"s must be a 2-D tensor, got {getattr(s, 'shape', type(s).__name__)}")
    if dim not in (0, 1) or isinstance(dim, bool):
        raise ValueError(f"dim must be 0 or 1, got {dim!r}")
    s = float_tensor("s", s, 2)
    ptr = index_tensor("ptr", ptr)
    same_device(s=s, ptr=ptr)
    if ptr.numel() < 1:
        raise ValueError("ptr must be a CSR pointer with at least one entry (num_segments + 1)")
    if ptr.device.type != "cpu" and validating(validate, s, ptr):  # CPU: checked in the operator
        pointer_values("ptr", ptr, s.shape[dim])
    return _SegmentSoftmax.apply(s, ptr, dim) if _backend.direct(s, ptr) else _segment_softmax_op(s, ptr, dim)


# ------------------------------------------------------------------------------ dense softmax
# The dense softmax as a custom operator: traced under torch.compile with dynamic shapes,
# inductor fused it with the neighbouring reshapes into a scalar (unvectorised) backward loop
# parallel over the heads only, far slower than the static-shape kernels; called as an
# operator it runs aten's kernels in every case.
@torch.library.custom_op("pyg_lie::softmax", mutates_args=())
def _dense_softmax_op(score: Tensor, dim: int) -> Tensor:
    return torch.softmax(score.contiguous(), dim=dim)  # contiguous in, contiguous out


@_dense_softmax_op.register_fake
def _(score, dim):
    return score.new_empty(score.shape)


@torch.library.custom_op("pyg_lie::softmax_backward", mutates_args=())
def _dense_softmax_backward_op(g: Tensor, w: Tensor, dim: int) -> Tensor:
    return torch.ops.aten._softmax_backward_data(g.contiguous(), w, dim, w.dtype)


@_dense_softmax_backward_op.register_fake
def _(g, w, dim):
    return w.new_empty(w.shape)


def _dense_setup(ctx, inputs, output) -> None:
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)


def _dense_grad(ctx, g: Tensor):
    (w,) = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True: the same formula with differentiable ops
        return w * (g - (g * w).sum(ctx.dim, keepdim=True)), None
    return _dense_softmax_backward_op(g, w, ctx.dim), None


_dense_softmax_op.register_autograd(_dense_grad, setup_context=_dense_setup)
float32_under_autocast(_dense_softmax_op, _dense_softmax_backward_op)


def dense_softmax(score: Tensor, dim: int) -> Tensor:
    """``torch.softmax(score, dim)`` as the operator ``torch.ops.pyg_lie.softmax`` (contiguous
    output), the normalisation of equal-size neighbourhoods ``(..., K)``. Differentiable twice."""
    if not isinstance(score, Tensor) or not score.is_floating_point():
        raise ValueError(f"score must be a floating tensor, got {getattr(score, 'dtype', type(score).__name__)}")
    if not -score.dim() <= dim < max(score.dim(), 1):
        raise ValueError(f"dim must index one of the {score.dim()} dimensions of score, got {dim}")
    return _dense_softmax_op(score, dim % max(score.dim(), 1))
