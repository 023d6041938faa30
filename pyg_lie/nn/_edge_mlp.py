r"""Per-edge MLPs (``Linear``/``SiLU`` stacks) evaluated in cache-sized chunks.

An MLP of width 16 on ``E`` edges is memory-bound on a CPU: autograd stores
every ``(E, 16)`` activation and the backward pass streams them back, so most of
the time goes to moving tensors much larger than the cache. :func:`edge_mlp`
instead runs the MLP on blocks of ``chunk`` rows, keeps only the input and the
weights, and recomputes each block's activations in the backward pass while
they are still in cache (gradient checkpointing at cache granularity). Memory
falls from ``O(E width layers)`` to ``O(E in_dim)``.

The first backward pass uses the closed-form derivatives of ``Linear`` and
``SiLU``. When a differentiable backward is requested (``create_graph=True``,
e.g. forces or Hamiltonian models that differentiate through a gradient) the same
closed-form backward is written with plain differentiable torch ops of the saved
inputs (:func:`_differentiable_backward`), so higher derivatives are exact and cost
a constant factor per order: the backward never calls autograd again, which would
walk through the whole history of the inputs (every earlier step of an ODE rollout)
on each call.
The chunked path is used on CPU for more than ``chunk`` rows; otherwise (CUDA,
small inputs, other layer types) the module runs as is. Its forward and backward
kernels are custom operators (``torch.ops.pyg_lie.edge_mlp`` and
``edge_mlp_backward``), so ``torch.compile`` calls them as they are: traced,
the MLP would lose its chunking and store every activation again.

:class:`HeadwiseMLP` (one MLP per head, the official LieTransformer's location kernel)
runs the same scheme with the heads leading (``pyg_lie.headwise_edge_mlp`` and
``headwise_edge_mlp_backward``). In float32 on CPU all four operators call the fused C kernel
of :mod:`pyg_lie.nn._native` (every layer of a block of edges in registers, SiLU written out;
a shared MLP is its single head), 1.6-2.5x faster than the chunked torch kernels, which
remain the fallback (float64, sizes the C kernel does not take, no C compiler,
``PYG_LIE_NATIVE=0``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Sequential, SiLU

from .. import ops
from . import _native
from ._autocast import float32_under_autocast

__all__ = ["edge_mlp", "EDGE_CHUNK", "HeadwiseMLP"]

#: rows per block: 16384 x 16 floats = 1 MiB of activations per layer. The blocks write into
#: buffers allocated once per call; with fresh per-block temporaries instead, glibc's malloc
#: handed their pages back to the OS and faulted them in again on every block (T(2), 1024
#: points, 32-neighbourhoods, one thread: 1000-3300 page faults and 27-31 ms per forward +
#: backward). With the buffers, 2 threads: 4096 / 8192 / 16384 / 32768 rows took 245-284 /
#: 232-246 / 223-232 / 223-225 ms on SE(2), 4 lifts, 32 x 32 points and 15.3-16.6 ms for all
#: sizes on that T(2) configuration
EDGE_CHUNK = 16384


def _layers(mlp: Sequential) -> bool:
    """True if ``mlp`` is ``Linear (SiLU Linear)*``, the only form the chunked path knows."""
    mods = list(mlp)
    if not mods or len(mods) % 2 == 0:
        return False
    return all(isinstance(m, Linear) if i % 2 == 0 else isinstance(m, SiLU) for i, m in enumerate(mods))


def _forward(x: Tensor, params: Sequence[Tensor]) -> Tensor:
    n = len(params) // 2
    h = x
    for i in range(n):
        h = F.linear(h, params[2 * i], params[2 * i + 1])
        if i < n - 1:
            h = F.silu(h)
    return h


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
    # product when it computes the transposed (2, 16) result (measured 37 vs 110 us), so
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


def _as_one_head(params: Sequence[Tensor]) -> List[Tensor]:
    """A shared MLP's parameters as the native kernel's single head: ``(1, out, in)``, ``(1, out)``."""
    return [p.unsqueeze(0) for p in params]


# Custom operators, so that torch.compile calls the chunked kernels as they are instead of
# tracing (and un-chunking) them.
@torch.library.custom_op("pyg_lie::edge_mlp", mutates_args=())
def _edge_mlp_op(x: Tensor, params: List[Tensor], chunk: int) -> Tensor:
    one = _as_one_head(params)
    if _native.headwise_supported(x, one):
        return _native.headwise_forward(x, one).t().contiguous()  # (out, E) -> (E, out)
    return _chunked_forward(x, params, chunk)


@_edge_mlp_op.register_fake
def _(x, params, chunk):
    return x.new_empty(x.shape[0], params[-2].shape[0])


@torch.library.custom_op("pyg_lie::edge_mlp_backward", mutates_args=())
def _edge_mlp_backward_op(grad_out: Tensor, x: Tensor, params: List[Tensor], chunk: int,
                          need_x: bool) -> List[Tensor]:
    one = _as_one_head(params)
    if _native.headwise_supported(x, one):
        gx, *gp = _native.headwise_backward(grad_out.t().contiguous(), x, one, need_x)
        return [gx, *[g[0].clone() for g in gp]]  # custom operators return fresh tensors, not views
    return _chunked_backward(grad_out, x, params, chunk, need_x)


def _backward_fake(grad_out, x, params, chunk, need_x):
    return [x.new_empty(x.shape if need_x else (0,)), *[torch.empty_like(p) for p in params]]


_edge_mlp_backward_op.register_fake(_backward_fake)


def _save(ctx, inputs, output) -> None:
    x, params, ctx.chunk = inputs
    ctx.save_for_backward(x, *params)


def _differentiable_backward(g: Tensor, x: Tensor, params: Sequence[Tensor], need_x: bool,
                             need_p: Sequence[bool]) -> List[Optional[Tensor]]:
    """``[d/dx, d/dW_1, d/db_1, ...]`` (``None`` where not needed) of ``sum(g * out)`` for the
    MLP with heads leading, ``params`` ``W_i (H, out_i, in_i)``, ``b_i (H, out_i)``, ``x (E, in)``
    and ``g (H, E, out)``, as plain torch ops (matmul, sigmoid, products), each with a
    closed-form derivative: the gradient of a gradient never re-enters this operator."""
    n = len(params) // 2
    hs, zs = [x], []
    for i in range(n - 1):  # the hidden activations, recomputed with differentiable ops
        z = torch.matmul(hs[-1], params[2 * i].transpose(1, 2)) + params[2 * i + 1].unsqueeze(1)
        zs.append(z)
        hs.append(F.silu(z))
    grads: List[Optional[Tensor]] = [None] * (2 * n)
    gx: Optional[Tensor] = None
    for i in reversed(range(n)):
        if need_p[2 * i]:
            grads[2 * i] = torch.matmul(g.transpose(1, 2), hs[i])  # (H, out, in)
        if need_p[2 * i + 1]:
            grads[2 * i + 1] = g.sum(1)
        if i == 0 and not need_x:
            break
        gh = torch.matmul(g, params[2 * i])  # (H, E, in_i)
        if i:
            sig = torch.sigmoid(zs[i - 1])  # silu'(z) = s (1 + z (1 - s)); aten's silu_backward has no derivative
            g = gh * (sig * (1 + zs[i - 1] * (1 - sig)))
        else:
            gx = gh.sum(0)
    return [gx, *grads]


def _autograd_rule(heads_leading: bool, backward_op):
    """Backward of a chunked MLP operator ``op(x, params, chunk)``: its backward operator, or,
    when a differentiable backward is asked for (``create_graph=True``), the closed form of
    :func:`_differentiable_backward`, so higher derivatives are exact at a constant cost."""
    def grad(ctx, grad_out: Tensor):
        x, *params = ctx.saved_tensors
        need_x, need_p = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if torch.is_grad_enabled():
            if heads_leading:  # grad_out (H, E) of a last layer with one output per head
                gx, *gp = _differentiable_backward(grad_out.unsqueeze(-1), x, params, need_x, need_p)
            else:  # a shared MLP: one head
                gx, *gp = _differentiable_backward(grad_out.unsqueeze(0), x, [p.unsqueeze(0) for p in params],
                                                   need_x, need_p)
                gp = [None if t is None else t.squeeze(0) for t in gp]
            return gx, gp, None
        gx, *gp = backward_op(grad_out.contiguous(), x, params, ctx.chunk, need_x)
        return (gx if need_x else None), [g if need else None for g, need in zip(gp, need_p)], None
    return grad


_edge_mlp_op.register_autograd(_autograd_rule(False, _edge_mlp_backward_op), setup_context=_save)
float32_under_autocast(_edge_mlp_op, _edge_mlp_backward_op)


def _as_module(x: Tensor, chunk: int) -> bool:
    """True where the MLP runs as its module: off CPU, inputs not ``(E, in)``, and small
    inputs other than float32 (float32 goes to the operators at any size: their native
    kernel, if built, beats the module)."""
    return x.device.type != "cpu" or x.dim() != 2 or (x.shape[0] <= chunk and x.dtype != torch.float32)


def edge_mlp(mlp, x: Tensor, chunk: Optional[int] = None) -> Tensor:
    """``mlp(x)`` for ``x (E, in)``, chunked and recomputed in backward on CPU (see module
    doc); ``mlp`` is a ``Linear``/``SiLU`` :class:`~torch.nn.Sequential` or a
    :class:`HeadwiseMLP` (blocks of ``chunk / heads`` rows); ``chunk`` defaults to
    :data:`EDGE_CHUNK` (read at call time). On CUDA, or with a backend selected by
    :func:`pyg_lie.ops.set_backend`, the operator :func:`pyg_lie.ops.edge_mlp` runs instead."""
    chunk = EDGE_CHUNK if chunk is None else chunk
    if ops.serves(x):  # the operator layer (Triton on CUDA)
        return ops.edge_mlp(mlp, x)
    if isinstance(mlp, HeadwiseMLP):
        # blocks of about the same size in memory: rows x heads x width
        chunk = max(1, chunk // mlp.heads)
        if _as_module(x, chunk):
            return mlp(x)
        return _headwise_op(x, mlp.params(), chunk).t()  # (E, H), stored heads first
    if _as_module(x, chunk) or not _layers(mlp):
        return mlp(x)
    params = []
    for m in mlp[::2]:
        params += [m.weight, m.bias if m.bias is not None else x.new_zeros(m.out_features)]
    return _edge_mlp_op(x, params, chunk)


# --------------------------------------------------------------------------- one MLP per head
class HeadwiseMLP(torch.nn.Module):
    r"""``H`` independent MLPs ``in -> hidden -> ... -> 1`` (SiLU between), one per head,
    evaluated on the same input: ``y[..., h] = MLP_h(x)``.

    This is the location kernel of the official LieTransformer code (a separate
    ``kernel_dim``-wide MLP per head), ``H`` times the work of one shared MLP with ``H``
    outputs. Weights are stored per head: ``weight_i (H, out_i, in_i)``, ``bias_i (H, out_i)``.
    On CPU, :func:`edge_mlp` evaluates it with the fused native kernel (float32) or, for
    more than ``chunk`` rows, in cache-sized blocks with the heads leading (``(H, rows,
    hidden)`` activations, batched products), recomputing the blocks in the backward pass
    like the shared MLP.

    Shapes: ``x (..., in)`` -> ``(..., H)``.
    """

    def __init__(self, in_dim: int, hidden: int, heads: int, layers: int):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [1]
        self.in_dim, self.hidden, self.heads, self.layers = in_dim, hidden, heads, layers
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.empty(heads, o, i)) for i, o in zip(dims[:-1], dims[1:])])
        self.biases = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.empty(heads, o)) for o in dims[1:]])
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w, b in zip(self.weights, self.biases):  # each head as a fresh torch.nn.Linear
            bound = 1.0 / w.shape[-1] ** 0.5
            torch.nn.init.uniform_(w, -bound, bound)  # = kaiming_uniform_(a=sqrt(5)) of Linear
            torch.nn.init.uniform_(b, -bound, bound)

    def params(self) -> List[Tensor]:
        return [t for wb in zip(self.weights, self.biases) for t in wb]

    def forward(self, x: Tensor) -> Tensor:
        return _headwise_forward(x, self.params())

    def extra_repr(self) -> str:
        return f"in={self.in_dim}, hidden={self.hidden}, heads={self.heads}, layers={self.layers}"


def _headwise_forward(x: Tensor, params: Sequence[Tensor]) -> Tensor:
    """Differentiable reference: ``x (..., in)`` -> ``(..., H)``."""
    n = len(params) // 2
    h = torch.einsum("...i,hoi->...ho", x, params[0]) + params[1]
    for i in range(1, n):
        h = torch.einsum("...hi,hoi->...ho", F.silu(h), params[2 * i]) + params[2 * i + 1]
    return h.squeeze(-1)


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
            else:  # x^T g, (H, in, width): 4x faster than g^T x for in = 2 (24 vs 105 us)
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


@torch.library.custom_op("pyg_lie::headwise_edge_mlp", mutates_args=())
def _headwise_op(x: Tensor, params: List[Tensor], chunk: int) -> Tensor:
    if _native.headwise_supported(x, params):
        return _native.headwise_forward(x, params)
    return _headwise_chunked_forward(x, params, chunk)


@_headwise_op.register_fake
def _(x, params, chunk):
    return x.new_empty(params[0].shape[0], x.shape[0])


@torch.library.custom_op("pyg_lie::headwise_edge_mlp_backward", mutates_args=())
def _headwise_backward_op(grad_out: Tensor, x: Tensor, params: List[Tensor], chunk: int,
                          need_x: bool) -> List[Tensor]:
    if _native.headwise_supported(x, params):
        return _native.headwise_backward(grad_out, x, params, need_x)
    return _headwise_chunked_backward(grad_out, x, params, chunk, need_x)


_headwise_backward_op.register_fake(_backward_fake)
_headwise_op.register_autograd(_autograd_rule(True, _headwise_backward_op), setup_context=_save)
float32_under_autocast(_headwise_op, _headwise_backward_op)
