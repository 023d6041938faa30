r"""Per-edge MLPs (``Linear``/``SiLU`` stacks) evaluated in cache-sized chunks.

An MLP of width 16 on ``E`` edges is memory-bound on a CPU: autograd stores
every ``(E, 16)`` activation and the backward pass streams them back, so most of
the time goes to moving tensors much larger than the cache. :func:`edge_mlp`
instead runs the MLP on blocks of ``chunk`` rows, keeps only the input and the
weights, and recomputes each block's activations in the backward pass while
they are still in cache (gradient checkpointing at cache granularity). Memory
falls from ``O(E width layers)`` to ``O(E in_dim)``.

The blocked kernels, the native C kernel (every layer of a block of edges in registers,
float32) and the closed-form backward are the operator :func:`pyg_lie.ops.mlp`
(``torch.ops.pyg_lie.mlp`` and ``mlp_backward``): in float32 on CPU the C kernel runs where it
takes the sizes, else the blocked torch kernels. When a differentiable backward is requested
(``create_graph=True``, e.g. forces or Hamiltonian models that differentiate through a
gradient) the same closed-form backward is written with plain differentiable torch
operations of the saved inputs, so higher derivatives are exact and cost a constant factor
per order: the backward never calls autograd again, which would walk through the whole
history of the inputs (every earlier step of an ODE rollout) on each call. As an operator,
``torch.compile`` calls it as it is: traced, the MLP would lose its chunking and store every
activation again.

Which runs, the operator or the module as it is (small float64 inputs, other layer types), is
chosen by :func:`pyg_lie.ops.edge_mlp`.
:class:`HeadwiseMLP` (one MLP per head, the official LieTransformer's location kernel) runs
the same scheme with the heads leading.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import ops

__all__ = ["edge_mlp", "EDGE_CHUNK", "HeadwiseMLP"]

#: rows per block of the chunked CPU kernels that the layers ask for (the operator's
#: :data:`pyg_lie.ops.mlp.DEFAULT_CHUNK`, where the choice of size is explained)
EDGE_CHUNK = 16384


def edge_mlp(mlp, x: Tensor, chunk: Optional[int] = None) -> Tensor:
    """``mlp(x)`` for ``x (E, in)``, chunked and recomputed in backward on CPU (see module
    doc): :func:`pyg_lie.ops.edge_mlp`, which chooses the kernel; ``mlp`` is a
    ``Linear``/``SiLU`` :class:`~torch.nn.Sequential` or a :class:`HeadwiseMLP`; ``chunk``
    defaults to :data:`EDGE_CHUNK` (read at call time)."""
    return ops.edge_mlp(mlp, x, EDGE_CHUNK if chunk is None else chunk)


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
