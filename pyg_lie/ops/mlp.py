r"""Edge MLPs: ``Linear`` / ``SiLU`` stacks on per-edge features (``torch.ops.pyg_lie.mlp``).

Two forms, one operator:

* shared (``headwise=False``): ``params = [W_0 (o_0, in), b_0 (o_0), ..., W_L (out, o_{L-1}), b_L (out)]``,
  ``x (E, in) -> (E, out)``, ``y = W_L silu(... silu(W_0 x + b_0) ...) + b_L``;
* headwise (``headwise=True``): ``H`` such MLPs with one output each, ``params = [W_0 (H, o_0, in),
  b_0 (H, o_0), ..., W_L (H, 1, o_{L-1}), b_L (H, 1)]``, ``x (E, in) -> (H, E)`` (heads first, the
  layout of attention scores).

The backward operator (``torch.ops.pyg_lie.mlp_backward``) gives the gradients of ``x`` and of every
parameter; a differentiable backward (``create_graph=True``) is the same closed form written in
torch operations, so second derivatives never re-enter the operators.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import positive_int
from . import _backend
from ._common import autocasting, float32_under_autocast, float_tensor, plain, same_device, same_dtype

__all__ = ["mlp", "edge_mlp", "composite_mlp", "composite_mlp_backward"]


def _as_heads(params: Sequence[Tensor], headwise: bool) -> List[Tensor]:
    return list(params) if headwise else [p.unsqueeze(0) for p in params]


def _dsilu(z: Tensor) -> Tensor:
    s = torch.sigmoid(z)
    return s * (1 + z * (1 - s))


def _heads_forward(x: Tensor, P: Sequence[Tensor]):
    """Pre-activations ``z_i (E, H, o_i)`` of every layer, heads form."""
    zs = [torch.einsum("ei,hoi->eho", x, P[0]) + P[1]]
    for i in range(1, len(P) // 2):
        zs.append(torch.einsum("ehi,hoi->eho", F.silu(zs[-1]), P[2 * i]) + P[2 * i + 1])
    return zs


def composite_mlp(x: Tensor, params: Sequence[Tensor], headwise: bool) -> Tensor:
    """The reference semantics of :func:`mlp` in differentiable torch operations."""
    z = _heads_forward(x, _as_heads(params, headwise))[-1]
    return z[..., 0].t() if headwise else z[:, 0]


def composite_mlp_backward(g: Tensor, x: Tensor, params: Sequence[Tensor], headwise: bool,
                           need_x: bool) -> List[Optional[Tensor]]:
    """``[gx (None unless need_x), gW_0, gb_0, ...]`` of :func:`mlp` for the output gradient
    ``g`` (shaped like the output), in closed form with differentiable torch operations."""
    P = _as_heads(params, headwise)
    n = len(P) // 2
    zs = _heads_forward(x, P)
    gz = g.t().unsqueeze(-1) if headwise else g.unsqueeze(1)  # (E, H, out)
    grads: List[Optional[Tensor]] = [None] * (2 * n)
    gx = None
    for i in reversed(range(n)):
        if i < n - 1:
            gz = gz * _dsilu(zs[i])
        if i:
            a = F.silu(zs[i - 1])
            grads[2 * i] = torch.einsum("eho,ehi->hoi", gz, a)
        else:
            grads[0] = torch.einsum("eho,ei->hoi", gz, x)
        grads[2 * i + 1] = gz.sum(0)
        if i:
            gz = torch.einsum("eho,hoi->ehi", gz, P[2 * i])
        elif need_x:
            gx = torch.einsum("eho,hoi->ei", gz, P[0])
    if not headwise:
        grads = [t.squeeze(0) for t in grads]
    return [gx, *grads]


# ------------------------------------------------------------------------------------ dispatch
def _native_ok(x: Tensor, P: Sequence[Tensor]) -> bool:
    nat = _backend._native_module()
    return nat.available() and nat.headwise_supported(x, P)


def _triton_ok(x: Tensor, P: Sequence[Tensor]) -> bool:
    from ._triton import MAX_MLP_WIDTH, mlp_width
    return mlp_width(x.shape[1], P[0::2]) <= MAX_MLP_WIDTH


def _pack(P: Sequence[Tensor], width: int, dtype: torch.dtype):
    """Weights ``(H, L, width, width)`` and biases ``(H, L, width)``, zero-padded, in ``dtype``."""
    Ws = [F.pad(W.to(dtype), (0, width - W.shape[2], 0, width - W.shape[1])) for W in P[0::2]]
    bs = [F.pad(b.to(dtype), (0, width - b.shape[1])) for b in P[1::2]]
    return torch.stack(Ws, 1).contiguous(), torch.stack(bs, 1).contiguous()


def _triton_layout(x: Tensor, params: Sequence[Tensor], headwise: bool):
    from . import _triton
    P = _as_heads(params, headwise)
    width = _triton.mlp_width(x.shape[1], P[0::2])
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    Wp, bp = _pack(P, width, acc)
    return _triton, P, width, Wp, bp


#: rows per block of the chunked CPU kernels: 16384 x 16 floats = 1 MiB of activations a layer.
#: The blocks write into buffers allocated once per call; with fresh per-block temporaries
#: instead, glibc's malloc handed their pages back to the OS and faulted them in again on every
#: block. Smaller blocks were slower on the LieSelfAttention benchmark's SE(2) configuration,
#: larger ones no faster
DEFAULT_CHUNK = 16384


def _chunked_forward(x: Tensor, params: Sequence[Tensor], headwise: bool, chunk: int) -> Tensor:
    from . import _chunked
    if headwise:
        return _chunked.headwise_chunked_forward(x, params, chunk)
    return _chunked.chunked_forward(x, params, chunk)


def _chunked_backward(g: Tensor, x: Tensor, params: Sequence[Tensor], headwise: bool, chunk: int,
                      need_x: bool) -> List[Tensor]:
    from . import _chunked
    if headwise:
        return _chunked.headwise_chunked_backward(g, x, params, chunk, need_x)
    return _chunked.chunked_backward(g, x, params, chunk, need_x)


def _mlp_impl(x: Tensor, params: List[Tensor], headwise: bool, chunk: int) -> Tensor:
    P = _as_heads(params, headwise)
    which = _backend.choose("mlp", x.device, lambda: _native_ok(x, P), lambda: _triton_ok(x, P), "chunked")
    if which == "chunked":
        return _chunked_forward(x, params, headwise, chunk)
    if which == "triton":
        _triton, P, width, Wp, bp = _triton_layout(x, params, headwise)
        return _triton.mlp_forward(x.contiguous(), Wp, bp, len(P) // 2, width, P[-2].shape[1], headwise)
    if which == "native":
        y = _backend._native_module().headwise_forward(x, P)  # (H out, E)
        return y if headwise else y.t().contiguous()
    with torch.no_grad():
        return composite_mlp(x, params, headwise).contiguous()


_mlp_op = torch.library.custom_op("pyg_lie::mlp", _mlp_impl, mutates_args=())


@_mlp_op.register_fake
def _(x, params, headwise, chunk):
    if headwise:
        return x.new_empty(params[0].shape[0], x.shape[0])
    return x.new_empty(x.shape[0], params[-2].shape[0])


def _mlp_backward_impl(g: Tensor, x: Tensor, params: List[Tensor], headwise: bool, need_x: bool,
                     chunk: int) -> List[Tensor]:
    P = _as_heads(params, headwise)
    which = _backend.choose("mlp_backward", x.device, lambda: _native_ok(x, P), lambda: _triton_ok(x, P),
                            "chunked")
    if which == "chunked":
        gx, *grads = _chunked_backward(g, x, params, headwise, chunk, need_x)
        gx = gx if need_x else None
    elif which == "composite":
        with torch.no_grad():
            gx, *grads = composite_mlp_backward(g, x, params, headwise, need_x)
    else:
        if which == "triton":
            _triton, P, width, Wp, bp = _triton_layout(x, params, headwise)
            gx, gW, gb = _triton.mlp_backward(g.contiguous(), x.contiguous(), Wp, bp, len(P) // 2, width,
                                              P[-2].shape[1], headwise, need_x)
            grads = []
            for li, (W, b) in enumerate(zip(P[0::2], P[1::2])):
                grads += [gW[:, li, :W.shape[1], :W.shape[2]].to(W.dtype), gb[:, li, :b.shape[1]].to(b.dtype)]
        else:
            gh = g if headwise else g.t()
            gx, *grads = _backend._native_module().headwise_backward(gh.contiguous(), x, P, need_x)
            gx = gx if need_x else None
        if not headwise:
            grads = [t.squeeze(0) for t in grads]
    grads = [t.contiguous().clone() if t._base is not None else t.contiguous() for t in grads]
    return [x.new_empty(0) if gx is None else gx.contiguous(), *grads]


_mlp_backward_op = torch.library.custom_op("pyg_lie::mlp_backward", _mlp_backward_impl, mutates_args=())


@_mlp_backward_op.register_fake
def _(g, x, params, headwise, need_x, chunk):
    return [x.new_empty(x.shape if need_x else (0,)), *[torch.empty_like(p) for p in params]]


def _setup(ctx, inputs, output) -> None:
    x, params, ctx.headwise, ctx.chunk = inputs
    ctx.save_for_backward(x, *params)


def _grads(ctx, g: Tensor, need_x: bool, need_p):
    x, *params = ctx.saved_tensors
    if torch.is_grad_enabled():  # differentiable: the closed form in torch operations
        gx, *gp = composite_mlp_backward(g, x, params, ctx.headwise, need_x)
    else:
        gx, *gp = _backend.call(_mlp_backward_op, _mlp_backward_impl, g.contiguous(), x, params, ctx.headwise,
                                need_x, ctx.chunk)
    return (gx if need_x else None), [t if need else None for t, need in zip(gp, need_p)]


def _backward(ctx, g: Tensor):
    gx, gp = _grads(ctx, g, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
    return gx, gp, None, None


_mlp_op.register_autograd(_backward, setup_context=_setup)
float32_under_autocast(_mlp_op, _mlp_backward_op)


class _MLP(torch.autograd.Function):
    """The operator's autograd rule without the dispatcher, for eager calls (parameters
    flattened into the arguments)."""

    @staticmethod
    def forward(ctx, x, headwise, chunk, *params):
        output = _mlp_impl(x, list(params), headwise, chunk)
        _setup(ctx, (x, params, headwise, chunk), output)
        return output

    @staticmethod
    def backward(ctx, g):
        need = ctx.needs_input_grad
        gx, gp = _grads(ctx, g, need[0], need[3:])
        return (gx, None, None, *gp)


# ---------------------------------------------------------------------------------- entry points
def mlp(x: Tensor, params: Sequence[Tensor], headwise: bool = False, chunk: Optional[int] = None) -> Tensor:
    """Evaluate an edge MLP (see the module doc for ``params``): ``x (E, in)`` -> ``(E, out)``
    (shared) or ``(H, E)`` (``headwise``). Differentiable in ``x`` and every parameter, twice.
    ``chunk``: rows per block of the chunked CPU kernels (default :data:`DEFAULT_CHUNK`), which
    run on CPU where the native kernel declines the inputs."""
    x = float_tensor("x", x, 2)
    if not isinstance(params, (list, tuple)) or len(params) < 2 or len(params) % 2:
        raise ValueError("params must be a list [W_0, b_0, ..., W_L, b_L] of weights and biases")
    params = [p if type(p) is Tensor or isinstance(p, torch.nn.Parameter) else plain(f"params[{i}]", p)
              for i, p in enumerate(params)]
    if any(p.device != x.device or p.dtype != x.dtype for p in params):  # name the culprit
        named = {f"params[{i}]": p for i, p in enumerate(params)}
        device = same_device(x=x, **named)
        if not autocasting(device):
            same_dtype(x=x, **named)
    wd = 3 if headwise else 2
    prev = x.shape[1]
    H = params[0].shape[0] if headwise and params[0].dim() == 3 else 1
    for i in range(0, len(params), 2):
        W, b = params[i], params[i + 1]
        want_w = ((H,) if headwise else ()) + (W.shape[-2] if W.dim() == wd else -1, prev)
        if W.dim() != wd or tuple(W.shape) != want_w:
            raise ValueError(f"params[{i}] must be a weight {'(H, out, in)' if headwise else '(out, in)'} "
                             f"with in = {prev}, got {tuple(W.shape)}")
        want_b = ((H,) if headwise else ()) + (W.shape[-2],)
        if tuple(b.shape) != want_b:
            raise ValueError(f"params[{i + 1}] must be a bias of shape {want_b}, got {tuple(b.shape)}")
        prev = W.shape[-2]
    if headwise and prev != 1:
        raise ValueError(f"a headwise MLP has one output a head: the last weight must be (H, 1, in), got "
                         f"{tuple(params[-2].shape)}")
    chunk = DEFAULT_CHUNK if chunk is None else positive_int("chunk", chunk)
    if _backend.direct(x, *params):
        return _MLP.apply(x, headwise, chunk, *params)
    return _mlp_op(x, params, headwise, chunk)


def _sequential_params(module, x: Tensor) -> Optional[List[Tensor]]:
    """``[W_0, b_0, ...]`` of a ``Linear (SiLU Linear)*`` :class:`~torch.nn.Sequential`, or None."""
    if not isinstance(module, torch.nn.Sequential):
        return None
    mods = list(module)
    if not mods or len(mods) % 2 == 0:
        return None
    for i, m in enumerate(mods):
        if not isinstance(m, torch.nn.Linear if i % 2 == 0 else torch.nn.SiLU):
            return None
    params = []
    for m in mods[::2]:
        params += [m.weight, m.bias if m.bias is not None else x.new_zeros(m.out_features)]
    return params


def edge_mlp(module, x: Tensor, chunk: Optional[int] = None) -> Tensor:
    """``module(x)`` through the :func:`mlp` operator where ``module`` is a ``Linear (SiLU
    Linear)*`` :class:`~torch.nn.Sequential` (``x (..., in) -> (..., out)``) or a headwise MLP
    with ``heads`` and ``params()`` (:class:`pyg_lie.nn._edge_mlp.HeadwiseMLP`: ``x (..., in) ->
    (..., H)``, returned as a view of heads-first storage); any other module is called as it is.

    ``chunk``: rows per block of the chunked CPU kernels (default :data:`DEFAULT_CHUNK`; a
    headwise MLP takes blocks of ``chunk / H`` rows, the same size in memory). Under the
    ``auto`` backend on CPU the module itself runs where it is as fast: inputs that are not
    ``(E, in)``, and at most one block of rows of another dtype than float32 (float32 takes
    the operator at any size: its native kernel beats the module). On CUDA, or with a
    backend selected by :func:`pyg_lie.ops.set_backend`, the operator runs at every size."""
    x = plain("x", x)
    headwise = hasattr(module, "heads") and callable(getattr(module, "params", None))
    params = list(module.params()) if headwise else _sequential_params(module, x)
    if params is None or x.dim() == 0:
        return module(x)
    chunk = DEFAULT_CHUNK if chunk is None else positive_int("chunk", chunk)
    if _backend.torch_path(x):
        if headwise:
            chunk = max(1, chunk // module.heads)
        if x.device.type != "cpu" or x.dim() != 2 or (x.shape[0] <= chunk and x.dtype != torch.float32):
            return module(x)
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    y = mlp(flat, params, headwise=True, chunk=chunk).t() if headwise else mlp(flat, params, chunk=chunk)
    return y.reshape(*lead, y.shape[-1])
