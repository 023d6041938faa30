"""The memory-lean CPU kernels of the edge MLP operator (:mod:`pyg_lie.ops.mlp`) where the
native C kernel does not take the inputs (float64, widths or depths beyond its limits, no C
compiler): ``Linear``/``SiLU`` stacks evaluated in cache-sized blocks of rows that keep only
the input and the weights and recompute each block's activations in the backward pass while
they are in cache (gradient checkpointing at cache granularity; memory ``O(E in)`` instead of
``O(E width layers)``).

Every block writes into buffers allocated once per call (``out=`` variants): with fresh
per-block temporaries, glibc's malloc handed their pages back to the OS and faulted them in
again on every block.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["chunked_forward", "chunked_backward", "headwise_chunked_forward", "headwise_chunked_backward"]


def _hidden_buffers(x: Tensor, params: Sequence[Tensor], rows: int) -> List[Tensor]:
    """One ``(rows, width_i)`` buffer per hidden layer."""
    return [x.new_empty(rows, params[2 * i].shape[0]) for i in range(len(params) // 2 - 1)]


def _linear_rows(b: Tensor, h: Tensor, W: Tensor, out: Tensor) -> None:
    torch.addmm(b, h, W.t(), out=out)  # (rows, in) -> (rows, out)


def _linear_heads(b: Tensor, h: Tensor, W: Tensor, out: Tensor) -> None:
    torch.baddbmm(b.unsqueeze(1), h, W.transpose(1, 2), out=out)  # (H, rows, in) -> (H, rows, out)


def _hidden(h: Tensor, params: Sequence[Tensor], act: List[Tensor], pre: Optional[List[Tensor]] = None,
            linear=_linear_rows) -> Tensor:
    """The hidden layers of one block, written into ``act[i] = silu(z_i)`` and ``pre[i] = z_i``
    (``pre=None``: SiLU in place); returns the last linear map's input."""
    for i, a in enumerate(act):
        z = a if pre is None else pre[i]
        linear(params[2 * i + 1], h, params[2 * i], z)
        if pre is None:
            F.silu(z, inplace=True)
        else:
            torch.ops.aten.silu.out(z, out=a)
        h = a
    return h


def _chunked_forward(x: Tensor, params: Sequence[Tensor], chunk: int) -> Tensor:
    # Every block writes into buffers allocated once per call (``out=`` variants): fresh
    # per-block temporaries made glibc return and re-fault their pages on every block.
    E = x.shape[0]
    out = x.new_empty(E, params[-2].shape[0])
    hidden = _hidden_buffers(x, params, min(chunk, E))
    for s in range(0, E, chunk):
        r = min(chunk, E - s)
        h = _hidden(x[s:s + r], params, [b[:r] for b in hidden])
        torch.addmm(params[-1], h, params[-2].t(), out=out[s:s + r])
    return out


def _chunked_backward(grad_out: Tensor, x: Tensor, params: Sequence[Tensor], chunk: int,
                      need_x: bool) -> List[Tensor]:
    """``[d/dx (empty unless need_x), d/dW_1, d/db_1, ...]``, block by block."""
    n, E = len(params) // 2, x.shape[0]
    # pre-activations z_i, silu(z_i) (the inputs of layer i + 1), d/d silu(z_i), d/d z_i
    pre, act, g_act, g_pre = (_hidden_buffers(x, params, min(chunk, E)) for _ in range(4))
    gx = torch.empty_like(x) if need_x else x.new_empty(0)
    # weight gradients as sums over rows: MKL is ~3x faster for a (16, 16384) @ (16384, 2)
    # product when it computes the transposed (2, 16) result, so
    # layers with fewer inputs than outputs accumulate W^T
    weights = params[0::2]
    flip = [W.shape[1] < W.shape[0] for W in weights]
    gw = [W.new_zeros(W.shape[1], W.shape[0]) if f else torch.zeros_like(W) for W, f in zip(weights, flip)]
    gb = [torch.zeros_like(b) for b in params[1::2]]
    for s in range(0, E, chunk):
        r = min(chunk, E - s)
        a, z = [b[:r] for b in act], [b[:r] for b in pre]
        _hidden(x[s:s + r], params, a, z)  # recompute the block's activations
        g = grad_out[s:s + r]
        for i in reversed(range(n)):
            if i < n - 1:  # g * silu'(z), one fused kernel
                g = torch.ops.aten.silu_backward.grad_input(g, z[i], grad_input=g_pre[i][:r])
            a_in = a[i - 1] if i else x[s:s + r]
            if flip[i]:
                gw[i].addmm_(a_in.t(), g)
            else:
                gw[i].addmm_(g.t(), a_in)
            gb[i].add_(g.sum(0))
            if i:
                g = torch.mm(g, params[2 * i], out=g_act[i - 1][:r])
            elif need_x:
                torch.mm(g, params[0], out=gx[s:s + r])
    gp: List[Tensor] = []
    for w, b, f in zip(gw, gb, flip):  # custom operators return fresh, dense outputs
        gp += [w.t().contiguous() if f else w, b]
    return [gx, *gp]


def _headwise_hidden(x: Tensor, params: Sequence[Tensor], act: List[Tensor],
                     pre: Optional[List[Tensor]] = None) -> Tensor:
    """Hidden layers of one block, heads leading: ``act[i] (H, r, width)``; returns the last
    layer's input (``x`` broadcast over heads when there is no hidden layer)."""
    return _hidden(x.expand(params[0].shape[0], *x.shape), params, act, pre, linear=_linear_heads)


def _headwise_buffers(x: Tensor, params: Sequence[Tensor], rows: int) -> List[Tensor]:
    H = params[0].shape[0]
    return [x.new_empty(H, rows, params[2 * i].shape[1]) for i in range(len(params) // 2 - 1)]


def _headwise_chunked_forward(x: Tensor, params: Sequence[Tensor], chunk: int) -> Tensor:
    """``(H, E)``: heads first, the layout of the attention scores."""
    E, H = x.shape[0], params[0].shape[0]
    out = x.new_empty(H, E)
    hidden = _headwise_buffers(x, params, min(chunk, E))
    w, b = params[-2], params[-1]  # (H, 1, k), (H, 1)
    for s in range(0, E, chunk):
        r = min(chunk, E - s)
        h = _headwise_hidden(x[s:s + r], params, [t[:, :r] for t in hidden])
        # (H, 1, k) @ (H, k, r): the row-vector product is 2-3x faster than (H, r, k) @ (H, k, 1)
        torch.baddbmm(b.unsqueeze(-1), w, h.transpose(1, 2), out=out[:, s:s + r].unsqueeze(1))
    return out


def _headwise_chunked_backward(grad_out: Tensor, x: Tensor, params: Sequence[Tensor], chunk: int,
                               need_x: bool) -> List[Tensor]:
    """``[d/dx (empty unless need_x), d/dW_1, d/db_1, ...]`` for ``grad_out (H, E)``."""
    n, E = len(params) // 2, x.shape[0]
    pre, act, g_act, g_pre = (_headwise_buffers(x, params, min(chunk, E)) for _ in range(4))
    H = params[0].shape[0]
    gx = torch.zeros_like(x) if need_x else x.new_empty(0)
    gw = [torch.zeros_like(p) for p in params[0::2]]
    gw[0] = gw[0].transpose(1, 2).contiguous()  # the first layer accumulates W^T (see below)
    gb = [torch.zeros_like(p) for p in params[1::2]]
    for s in range(0, E, chunk):
        r = min(chunk, E - s)
        a, z = [t[:, :r] for t in act], [t[:, :r] for t in pre]
        xs = x[s:s + r]
        _headwise_hidden(xs, params, a, z)
        g = grad_out[:, s:s + r].unsqueeze(-1)  # (H, r, 1)
        for i in reversed(range(n)):
            if i < n - 1:
                g = torch.ops.aten.silu_backward.grad_input(g, z[i], grad_input=g_pre[i][:, :r])
            if i:
                gw[i].baddbmm_(g.transpose(1, 2), a[i - 1])
            else:  # x^T g, (H, in, width): several times faster than g^T x for in = 2
                gw[0].baddbmm_(xs.t().expand(H, xs.shape[1], r), g)
            gb[i].add_(g.sum(1))
            if i:
                if g.shape[-1] == 1:  # from the output layer: an outer product
                    g = torch.mul(g, params[2 * i], out=g_act[i - 1][:, :r])
                else:
                    g = torch.bmm(g, params[2 * i], out=g_act[i - 1][:, :r])
            elif need_x:
                gx[s:s + r] = torch.bmm(g, params[0]).sum(0)
    gw[0] = gw[0].transpose(1, 2).contiguous()
    return [gx, *[t for wb in zip(gw, gb) for t in wb]]


chunked_forward, chunked_backward = _chunked_forward, _chunked_backward
headwise_chunked_forward, headwise_chunked_backward = _headwise_chunked_forward, _headwise_chunked_backward
