r"""Relative logarithms on edges (``torch.ops.pyg_lie.se2_relative_log``).

For SE(2) elements ``g (N, 3, 3)`` and edges ``e = (j -> i)``: the ``(E, 3)`` coordinates
``(u_x, u_y, sqrt(2) theta)`` of ``log(g_i^{-1} g_j)`` in the basis of
:class:`pyg_lie.groups.SE2`, computed per edge from the angle terms ``tr(R_i^T R_j)``,
``(R_i^T R_j)_{10} - (R_i^T R_j)_{01}`` and ``R_i^T (t_j - t_i)`` without forming the product.
With ``cut_below``, an angle ``theta < cut_below`` moves to ``theta + 2 pi`` and the whole
vector scales by ``(theta + 2 pi) / theta`` (:meth:`pyg_lie.groups.SE2.one_sided_cut`).
CPU float32: the native kernel; elsewhere the composite implementation. Differentiable in
``g`` (twice): the backward differentiates the composite implementation.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .._tracing import compiling
from . import _backend
from ._common import eager_function, float_tensor, plain, same_device
from .._safe import half_cot_half

__all__ = ["se2_relative_log", "composite_se2_relative_log"]


def composite_se2_relative_log(g: Tensor, edge_index: Tensor, cut_below: Optional[float]) -> Tensor:
    """The reference semantics of :func:`se2_relative_log` in differentiable torch operations."""
    src, dst = edge_index[0], edge_index[1]
    rows = g[:, :2, :].reshape(g.shape[0], 6)  # R00 R01 t0 R10 R11 t1
    a00, a01, a02, a10, a11, a12 = rows.index_select(0, dst).unbind(1)  # target i
    b00, b01, b02, b10, b11, b12 = rows.index_select(0, src).unbind(1)  # source j
    cos2 = a00 * b00 + a10 * b10 + a01 * b01 + a11 * b11
    sin2 = (a01 * b00 + a11 * b10) - (a00 * b01 + a10 * b11)
    d0, d1 = b02 - a02, b12 - a12
    theta = torch.atan2(sin2, cos2)
    t0, t1 = a00 * d0 + a10 * d1, a01 * d0 + a11 * d1
    a, b = half_cot_half(theta), theta / 2
    xi = torch.stack([a * t0 + b * t1, -b * t0 + a * t1, math.sqrt(2.0) * theta], -1)
    if cut_below is None:
        return xi
    flip = theta < cut_below
    safe = torch.where(flip, theta, torch.ones_like(theta))
    factor = torch.where(flip, (safe + 2 * math.pi) / safe, torch.ones_like(theta))
    return xi * factor.unsqueeze(-1)


def _native_ok(g: Tensor, edge_index: Tensor) -> bool:
    nat = _backend._native_module()
    return g.dtype == torch.float32 and nat.available() and nat.usable(g, edge_index)


def _se2_log_impl(g: Tensor, edge_index: Tensor, cut_below: Optional[float]) -> Tensor:
    res = []

    def native_ok() -> bool:
        if not _native_ok(g, edge_index):
            return False
        res.append(_backend._native_module().se2_relative_log(g, edge_index, cut_below))
        return res[0] is not None  # None: an index out of range (raised below)

    if _backend.choose("se2_relative_log", g.device, native_ok, lambda: False) == "native":
        return res[0]
    if edge_index.numel():
        lo, hi = torch.aminmax(edge_index)
        if int(lo) < 0 or int(hi) >= g.shape[0]:
            raise ValueError(f"edge_index must hold node indices in [0, {g.shape[0]}) (rows of g)")
    return composite_se2_relative_log(g, edge_index, cut_below).contiguous()


_se2_log_op = torch.library.custom_op("pyg_lie::se2_relative_log", _se2_log_impl, mutates_args=())


@_se2_log_op.register_fake
def _(g, edge_index, cut_below):
    return g.new_empty(edge_index.shape[1], 3)


def _setup(ctx, inputs, output) -> None:
    g, edge_index, ctx.cut_below = inputs
    ctx.save_for_backward(g, edge_index)


def _backward(ctx, grad: Tensor):
    g, edge_index = ctx.saved_tensors
    create_graph = torch.is_grad_enabled()
    with torch.enable_grad():
        gi = g if create_graph else g.detach().requires_grad_()
        xi = composite_se2_relative_log(gi, edge_index, ctx.cut_below)
        (gg,) = torch.autograd.grad(xi, gi, grad, create_graph=create_graph)
    return gg, None, None


_se2_log_op.register_autograd(_backward, setup_context=_setup)


_RelativeLog = eager_function("_RelativeLog", _se2_log_impl, _setup, _backward)


def se2_relative_log(g: Tensor, edge_index: Tensor, cut_below: Optional[float] = None) -> Tensor:
    """``(E, 3)`` coordinates of ``log(g_i^{-1} g_j)`` for SE(2) elements ``g (N, 3, 3)`` and
    ``edge_index (2, E)`` (row 0 source ``j``, row 1 target ``i``, indices in ``[0, N)``); see
    the module doc for ``cut_below``."""
    g = float_tensor("g", g, 3)
    if g.shape[1:] != (3, 3):
        raise ValueError(f"g must hold (N, 3, 3) SE(2) matrices, got shape {tuple(g.shape)}")
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be a (2, E) index tensor, got "
                         f"{getattr(edge_index, 'shape', type(edge_index).__name__)}")
    edge_index = plain("edge_index", edge_index)
    if edge_index.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"edge_index must be an int64 (or int32) index tensor, got {edge_index.dtype}")
    same_device(g=g, edge_index=edge_index)
    from .._checks import finite_float
    if cut_below is not None:  # (a symbolic float while tracing: checked in eager calls)
        cut_below = float(cut_below) if compiling() else finite_float("cut_below", cut_below,
                                                                                        ", or None")
    args = (g, edge_index.long(), cut_below)
    return _RelativeLog.apply(*args) if _backend.direct(g, args[1]) else _se2_log_op(*args)
