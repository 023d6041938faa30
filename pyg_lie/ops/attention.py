r"""Fused softmax attention on target-sorted CSR edges (``torch.ops.pyg_lie.csr_attention``).

.. math::
    s_{h,e} = q_{i,h} \cdot k_{j,h} + l_{h,e} + b_{(h,)e}, \qquad
    w_{h,e} = \frac{\exp s_{h,e}}{\sum_{e' \to i} \exp s_{h,e'}}, \qquad
    \mathrm{out}_{i,h} = \sum_{e = (j \to i)} w_{h,e}\, v_{j,h}

for the edges ``e = (j -> i)`` of a CSR pattern (``crow (N + 1,)`` over targets, ``col (E,)``
sources). A row whose edges all score ``-inf`` (every edge masked by ``b = log 0``), like a
row without edges, gets zero weights and a zero output.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .._tracing import compiling
from . import _backend
from ._common import (autocasting, check_csr, check_csr_values, eager_function, float32_under_autocast,
                      float_tensor, index_tensor, plain, rows_of, same_device, same_dtype, transpose_csr)

__all__ = ["csr_attention", "composite_attention", "composite_attention_backward"]


# ------------------------------------------------------------------------- composite reference
def _segment_softmax(s: Tensor, row: Tensor, n: int) -> Tensor:
    """Softmax of ``s (H, E)`` over the edges of each target ``row``; rows without a finite
    score give zeros. Differentiable (the shift is a constant)."""
    H = s.shape[0]
    idx = row.unsqueeze(0).expand(H, -1)
    m = torch.full((H, n), float("-inf"), dtype=s.dtype, device=s.device)
    m = m.scatter_reduce(1, idx, s.detach(), "amax", include_self=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m.gather(1, idx))
    z = torch.zeros_like(m).index_add(1, row, e)
    z = torch.where(z > 0, z, torch.ones_like(z))
    return e / z.gather(1, idx)


def composite_attention(q: Tensor, k: Tensor, v: Tensor, l: Optional[Tensor], b: Optional[Tensor],
                        crow: Tensor, col: Tensor) -> Tuple[Tensor, Tensor]:
    """The reference semantics of :func:`csr_attention` in differentiable torch operations."""
    E = col.numel()
    row = rows_of(crow, E)
    col = col.long()
    s = (q.index_select(0, row) * k.index_select(0, col)).sum(-1).t()
    if l is not None:
        s = s + l
    if b is not None:
        s = s + b
    w = _segment_softmax(s, row, q.shape[0])
    out = torch.zeros_like(q).index_add(0, row, w.t().unsqueeze(-1) * v.index_select(0, col))
    return out, w


def composite_attention_backward(q: Tensor, k: Tensor, v: Tensor, w: Tensor, g: Tensor, gw: Optional[Tensor],
                                 crow: Tensor, col: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""``(gq, gk, gv, ds)`` of :func:`csr_attention` in closed form, with differentiable torch
    operations: ``dw = g_i . v_j + gw``, ``ds = w (dw - \sum_{row} w dw)``,
    ``gq_i = \sum ds k_j``, ``gk_j = \sum ds q_i``, ``gv_j = \sum w g_i``; ``ds (H, E)`` is the
    gradient of the scores (of ``l``, and of ``b`` summed over heads where ``b`` is ``(E,)``)."""
    E, N = col.numel(), q.shape[0]
    row = rows_of(crow, E)
    col = col.long()
    g_rows = g.index_select(0, row)
    dw = (g_rows * v.index_select(0, col)).sum(-1).t()
    if gw is not None:
        dw = dw + gw
    delta = torch.zeros(w.shape[0], N, dtype=w.dtype, device=w.device).index_add(1, row, w * dw)
    ds = w * (dw - delta.index_select(1, row))
    dst = ds.t().unsqueeze(-1)
    gq = torch.zeros_like(q).index_add(0, row, dst * k.index_select(0, col))
    gk = torch.zeros_like(k).index_add(0, col, dst * q.index_select(0, row))
    gv = torch.zeros_like(v).index_add(0, col, w.t().unsqueeze(-1) * g_rows)
    return gq, gk, gv, ds


# ------------------------------------------------------------------------------------ dispatch
def _native_forward_ok(q, k, v, l, b) -> bool:
    nat = _backend._native_module()
    return (b is None and l is not None and k.shape[0] == q.shape[0] and nat.available()
            and nat.csr_attention_supported(q, k, v, l))


def _native_unfused_ok(q, k, v, *ts) -> bool:
    """The native CSR products take the inputs (float32 or float64 on CPU) where the fused
    kernel does not (another dtype, a head width that is no multiple of 8)."""
    nat = _backend._native_module()
    return k.shape[0] == q.shape[0] and nat.available() and nat.csr_supported(q, k, v, *ts)


def _native_softmax(s: Tensor, crow: Tensor) -> Tensor:
    nat = _backend._native_module()
    w = nat.segment_softmax(s, crow) if nat.segment_softmax_supported(s) else None
    return _segment_softmax(s, rows_of(crow, s.shape[1]), crow.numel() - 1) if w is None else w


def _native_unfused_forward(q, k, v, l, crow, col) -> Tuple[Tensor, Tensor]:
    nat = _backend._native_module()
    w = _native_softmax(nat.csr_sddmm(q, k, crow, col).add_(l), crow)
    return nat.csr_spmm(w, v, crow, col), w


def _native_unfused_backward(q, k, v, w, g, gw, crow, col, crow_t, col_t, perm_t):
    nat = _backend._native_module()
    dw = nat.csr_sddmm(g, v, crow, col)
    if gw is not None:
        dw += gw
    wd = w * dw
    delta = torch.zeros(w.shape[0], q.shape[0], dtype=w.dtype).index_add_(1, rows_of(crow, col.numel()), wd)
    ds = wd.sub_(w * delta.index_select(1, rows_of(crow, col.numel())))
    gq = nat.csr_spmm(ds, k, crow, col)
    gk = nat.csr_spmm(ds, q, crow_t, col_t, wperm=perm_t)
    gv = nat.csr_spmm(w, g, crow_t, col_t, wperm=perm_t)
    return gq, gk, gv, ds


def _triton_ok(q) -> bool:
    return q.shape[-1] <= 256 and q.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _attention_impl(q: Tensor, k: Tensor, v: Tensor, l: Optional[Tensor], b: Optional[Tensor], crow: Tensor,
                  col: Tensor, crow_t: Optional[Tensor], col_t: Optional[Tensor],
                  perm_t: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    fused = []

    def native_ok() -> bool:
        fused.append(_native_forward_ok(q, k, v, l, b))
        return fused[0] or (b is None and l is not None and _native_unfused_ok(q, k, v, l))

    which = _backend.choose("csr_attention", q.device, native_ok, lambda: _triton_ok(q))
    if which == "triton":
        from . import _triton
        return _triton.attention_forward(q.contiguous(), k.contiguous(), v.contiguous(),
                                         None if l is None else l.contiguous(),
                                         None if b is None else b.contiguous(), crow.contiguous(), col.contiguous())
    if which == "native" and not fused[0]:
        return _native_unfused_forward(q, k, v, l, crow, col)
    if which == "native":
        res = _backend._native_module().csr_attention(q, k, v, l, crow, col)
        if res is None:
            raise ValueError("crow is not a CSR row pointer of the edges in col")
        return res
    with torch.no_grad():
        out, w = composite_attention(q, k, v, l, b, crow, col)
    return out, w.contiguous()


_attention_op = torch.library.custom_op("pyg_lie::csr_attention", _attention_impl, mutates_args=())


@_attention_op.register_fake
def _(q, k, v, l, b, crow, col, crow_t, col_t, perm_t):
    return torch.empty_like(q), q.new_empty(q.shape[1], col.shape[0])


def _attention_backward_impl(g: Tensor, gw: Optional[Tensor], q: Tensor, k: Tensor, v: Tensor, w: Tensor,
                           crow: Tensor, col: Tensor, crow_t: Optional[Tensor], col_t: Optional[Tensor],
                           perm_t: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    fused = []

    def native_ok():
        nat = _backend._native_module()
        fused.append(k.shape[0] == q.shape[0] and nat.available() and nat.csr_attention_supported(q, k, v, w))
        return fused[0] or _native_unfused_ok(q, k, v, w, g)

    which = _backend.choose("csr_attention_backward", q.device, native_ok, lambda: _triton_ok(q))
    if which in ("triton", "native") and (crow_t is None or col_t is None or perm_t is None):
        crow_t, col_t, perm_t = transpose_csr(crow, col, k.shape[0])
    if which == "triton":
        from . import _triton
        return _triton.attention_backward(q.contiguous(), k.contiguous(), v.contiguous(), w.contiguous(),
                                          g.contiguous(), None if gw is None else gw.contiguous(),
                                          crow.contiguous(), col.contiguous(), crow_t.contiguous(),
                                          col_t.contiguous(), perm_t.contiguous())
    if which == "native" and not fused[0]:
        return _native_unfused_backward(q, k, v, w, g, gw, crow, col, crow_t, col_t, perm_t)
    if which == "native":
        return _backend._native_module().csr_attention_backward(q, k, v, w, g, gw, crow, col, crow_t, col_t, perm_t)
    with torch.no_grad():
        gq, gk, gv, ds = composite_attention_backward(q, k, v, w, g, gw, crow, col)
    return gq, gk, gv, ds.contiguous()


_attention_backward_op = torch.library.custom_op("pyg_lie::csr_attention_backward", _attention_backward_impl,
                                                 mutates_args=())


@_attention_backward_op.register_fake
def _(g, gw, q, k, v, w, crow, col, crow_t, col_t, perm_t):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(w)


def _setup(ctx, inputs, output) -> None:
    q, k, v, l, b, crow, col, crow_t, col_t, perm_t = inputs
    ctx.set_materialize_grads(False)  # an unused w gets no zero gradient to read
    ctx.has_l, ctx.has_b = l is not None, b is not None
    ctx.b_per_head = b is not None and b.dim() == 2
    ctx.save_for_backward(q, k, v, l, b, crow, col, crow_t, col_t, perm_t, output[1])


def _backward(ctx, g: Optional[Tensor], gw: Optional[Tensor]):
    q, k, v, l, b, crow, col, crow_t, col_t, perm_t, w = ctx.saved_tensors
    if g is None and gw is None:
        return (None,) * 10
    if g is None:
        g = torch.zeros_like(q)
    if torch.is_grad_enabled():
        # a differentiable backward (create_graph=True): the closed form in torch operations on
        # weights recomputed from the inputs, so second derivatives never re-enter this operator
        _, w = composite_attention(q, k, v, l, b, crow, col)
        gq, gk, gv, ds = composite_attention_backward(q, k, v, w, g, gw, crow, col)
    else:
        gq, gk, gv, ds = _backend.call(_attention_backward_op, _attention_backward_impl, g, gw, q, k, v, w, crow,
                                       col, crow_t, col_t, perm_t)
    need = ctx.needs_input_grad
    gl = ds if ctx.has_l and need[3] else None
    gb = None
    if ctx.has_b and need[4]:
        gb = ds if ctx.b_per_head else ds.sum(0)
    return (gq if need[0] else None, gk if need[1] else None, gv if need[2] else None, gl, gb,
            None, None, None, None, None)


_attention_op.register_autograd(_backward, setup_context=_setup)
float32_under_autocast(_attention_op, _attention_backward_op)


_Attention = eager_function("_Attention", _attention_impl, _setup, _backward)


# ---------------------------------------------------------------------------------- entry points
def csr_attention(q: Tensor, k: Tensor, v: Tensor, crow: Tensor, col: Tensor, l: Optional[Tensor] = None,
                  b: Optional[Tensor] = None, *, transpose: Optional[Tuple[Tensor, Tensor, Tensor]] = None,
                  validate: Optional[bool] = None) -> Tuple[Tensor, Tensor]:
    r"""Multi-head softmax attention on target-sorted CSR edges, fused (see the module doc).

    Args:
        q: ``(N, H, D)`` queries of the targets.
        k, v: ``(M, H, D)`` keys and values of the sources.
        crow: ``(N + 1,)`` CSR row pointer over targets (int64 or int32).
        col: ``(E,)`` source of every edge, edges sorted by target.
        l: optional ``(H, E)`` location scores added to ``q . k``.
        b: optional additive log-bias ``(E,)`` (all heads) or ``(H, E)``, e.g. ``log(mask)`` of
            an explainer's edge mask: a 0 mask entry (``-inf``) removes the edge exactly.
        transpose: optional ``(crow_t, col_t, perm_t)`` of the transposed pattern (rows =
            sources; see :func:`pyg_lie.ops._common.transpose_csr`) for the backward kernels;
            built in the backward when not given.
        validate: check the values of ``crow`` and ``col`` (a row pointer from 0 to ``E``,
            sources in range), so that no kernel reads out of bounds: ``None`` (default) checks
            CPU tensors only (on a GPU the check costs a device synchronisation); pass ``True``
            for CUDA patterns of unknown origin.

    Returns:
        ``(out (N, H, D), w (H, E))``. Differentiable in ``q, k, v, l, b``, twice.
    """
    q, k, v = float_tensor("q", q, 3), float_tensor("k", k, 3), float_tensor("v", v, 3)
    l = float_tensor("l", l, 2, optional=True)
    b = plain_bias(b)
    crow, col = index_tensor("crow", crow), index_tensor("col", col)
    device = same_device(q=q, k=k, v=v, l=l, b=b, crow=crow, col=col)
    if not autocasting(device):
        same_dtype(q=q, k=k, v=v, l=l, b=b)
    N, H, D = q.shape
    if k.shape != v.shape or k.shape[1:] != q.shape[1:]:
        raise ValueError(f"k and v must be (M, H, D) with the (H, D) of q {tuple(q.shape)}, got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    E = col.numel()
    if l is not None and l.shape != (H, E):
        raise ValueError(f"l must be (H, E) = {(H, E)} (heads, edges), got {tuple(l.shape)}")
    if b is not None and b.shape not in ((E,), (H, E)):
        raise ValueError(f"b must be (E,) = {(E,)} or (H, E) = {(H, E)}, got {tuple(b.shape)}")
    check_csr(crow, col, N, k.shape[0])
    if compiling():
        validate = False  # data-dependent checks would break the graph; check outside
    validate = validate or (validate is None and crow.device.type == "cpu")
    if validate:
        check_csr_values(crow, col, k.shape[0])
    crow_t = col_t = perm_t = None
    if transpose is not None:
        crow_t, col_t, perm_t = (index_tensor(n, t) for n, t in zip(("crow_t", "col_t", "perm_t"), transpose))
        same_device(crow=crow, crow_t=crow_t, col_t=col_t, perm_t=perm_t)
        if crow_t.numel() != k.shape[0] + 1 or col_t.numel() != E or perm_t.numel() != E:
            raise ValueError("transpose must be (crow_t (M + 1,), col_t (E,), perm_t (E,)) of the transposed pattern")
        if validate:
            check_csr_values(crow_t, col_t, N, names=("transpose: crow_t", "transpose: col_t"))
            if E and bool((perm_t < 0).any() | (perm_t >= E).any()):
                raise ValueError(f"transpose: perm_t must hold edge positions in [0, {E})")
    args = (q, k, v, l, b, crow, col, crow_t, col_t, perm_t)
    return _Attention.apply(*args) if _backend.direct(*args) else _attention_op(*args)


def plain_bias(b) -> Optional[Tensor]:
    b = plain("b", b, optional=True)
    if b is None:
        return None
    if b.dim() not in (1, 2):
        raise ValueError(f"b must be (E,) or (H, E), got shape {tuple(b.shape)}")
    return float_tensor("b", b, b.dim())
