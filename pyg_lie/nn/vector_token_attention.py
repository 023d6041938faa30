r"""Scaled dot-product attention on vector tokens: the non-equivariant baseline (model *A*) of
Musialski, arXiv 2606.20547, beside :class:`~pyg_lie.nn.LieAlgebraAttention`.
"""
from __future__ import annotations

import math
from typing import Optional

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing

from .. import _checks as checks
from .._checks import positive_int, probability
from .attention_core import edge_attention

__all__ = ["VectorTokenAttention"]


class VectorTokenAttention(MessagePassing):
    r"""Scaled dot-product attention on vector tokens (the paper's baseline A).

    ``alpha_ij^h = softmax_j (q_i^h . k_j^h / sqrt(C))``, ``out_i^h = sum_j alpha_ij^h v_j^h``
    with ``q, k, v`` linear in ``x`` and ``C = out_channels / heads`` the head width.

    ``out_channels`` is always the output width: the heads split it (``heads`` must divide it).

    Shapes: ``x (N, in_channels)``, ``edge_index (2, E)`` -> ``(N, out_channels)``, and with
    ``return_attention_weights=True`` also ``(edge_index, alpha (E, heads))``.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, dropout: float = 0.0) -> None:
        super().__init__(node_dim=0, aggr="add")
        in_channels, out_channels = positive_int("in_channels", in_channels), positive_int("out_channels", out_channels)
        heads = positive_int("heads", heads)
        if out_channels % heads:
            raise ValueError(f"out_channels ({out_channels}) must be divisible by heads ({heads}): the heads split "
                             "the output width")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.head_dim = out_channels // heads
        self.dropout = probability("dropout", dropout)
        self.lin_q = nn.Linear(in_channels, out_channels)
        self.lin_k = nn.Linear(in_channels, out_channels)
        self.lin_v = nn.Linear(in_channels, out_channels)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for lin in (self.lin_q, self.lin_k, self.lin_v):
            lin.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, return_attention_weights: Optional[bool] = None):
        checks.node_features("x", x, self.in_channels, self.lin_q.weight)
        given = edge_index
        checks.edge_index(edge_index)
        edge_index = checks.index_tensor("edge_index", edge_index, x.shape[0])
        H, C = self.heads, self.head_dim
        q = self.lin_q(x).view(-1, H, C)
        k = self.lin_k(x).view(-1, H, C)
        v = self.lin_v(x).view(-1, H, C)
        src, dst = edge_index[0], edge_index[1]
        s = (q[dst] * k[src]).sum(-1) / math.sqrt(C)
        alpha = edge_attention(s, dst, num_nodes=x.shape[0])
        out = self.propagate(edge_index, v=v, alpha=F.dropout(alpha, self.dropout, self.training))
        out = out.reshape(-1, self.out_channels)
        return (out, (given, alpha)) if return_attention_weights else out

    def message(self, v_j: Tensor, alpha: Tensor) -> Tensor:
        return v_j * alpha.unsqueeze(-1)

    def num_score_parameters(self) -> int:
        return sum(p.numel() for p in (*self.lin_q.parameters(), *self.lin_k.parameters()))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
