r"""Scaled dot-product attention on vector tokens: the non-equivariant baseline (model *A*) of
Musialski, arXiv 2606.20547, beside :class:`~pyg_lie.nn.LieAlgebraAttention`.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing

from .. import _checks as checks
from .._checks import positive_int, probability
from . import _explain
from ._bipartite import check_bipartite_edges, node_pair
from ._explain import check_explain_mode, masked_edge_attention, score_mask
from .attention_core import edge_attention

__all__ = ["VectorTokenAttention"]


class VectorTokenAttention(MessagePassing):
    r"""Scaled dot-product attention on vector tokens (the paper's baseline A).

    ``alpha_ij^h = softmax_j (q_i^h . k_j^h / sqrt(C))``, ``out_i^h = sum_j alpha_ij^h v_j^h``
    with ``q, k, v`` linear in ``x`` and ``C = out_channels / heads`` the head width.

    ``out_channels`` is always the output width: the heads split it (``heads`` must divide it).
    ``explain_mode``: where PyG's explainer edge mask acts, ``"score"`` (default: a log-bias on
    the scores, a 0/1 mask equals removing the edges) or ``"message"`` (on the messages after
    the softmax, PyG's default); see :mod:`pyg_lie.nn._explain`.

    Shapes: ``x (N, in_channels)`` or a bipartite pair ``(x_src (N_src, in_channels), x_dst
    (N_dst, in_channels))`` (queries from the targets, keys and values from the sources),
    ``edge_index (2, E)`` -> ``(N_dst, out_channels)``, and with
    ``return_attention_weights=True`` also ``(edge_index, alpha (E, heads))``.

    Example:
        >>> import torch
        >>> from pyg_lie.nn import VectorTokenAttention
        >>> _ = torch.manual_seed(0)
        >>> layer = VectorTokenAttention(6, 8, heads=2)
        >>> x = torch.randn(4, 6)
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 3], [1, 2, 3, 0, 1]])
        >>> out, (ei, alpha) = layer(x, edge_index, return_attention_weights=True)
        >>> out.shape, alpha.shape
        (torch.Size([4, 8]), torch.Size([5, 2]))
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, dropout: float = 0.0, *,
                 explain_mode: str = "score") -> None:
        super().__init__(node_dim=0, aggr="add")
        in_channels, out_channels = positive_int("in_channels", in_channels), positive_int("out_channels", out_channels)
        heads = positive_int("heads", heads)
        if out_channels % heads:
            raise ValueError(f"out_channels ({out_channels}) must be divisible by heads ({heads}): the heads split "
                             "the output width")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.head_dim = out_channels // heads
        self.dropout = probability("dropout", dropout)
        self.explain_mode = check_explain_mode(explain_mode)
        self.lin_q = nn.Linear(in_channels, out_channels)
        self.lin_k = nn.Linear(in_channels, out_channels)
        self.lin_v = nn.Linear(in_channels, out_channels)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for lin in (self.lin_q, self.lin_k, self.lin_v):
            lin.reset_parameters()

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]], edge_index: Tensor,
                return_attention_weights: Optional[bool] = None):
        x_src, x_dst, bipartite = node_pair("x", x)
        checks.node_features("x[0] (x_src)" if bipartite else "x", x_src, self.in_channels, self.lin_q.weight)
        if bipartite:
            checks.node_features("x[1] (x_dst)", x_dst, self.in_channels, self.lin_q.weight)
        given = edge_index
        checks.edge_index(edge_index)
        N_src, N_dst = x_src.shape[0], x_dst.shape[0]
        if bipartite:
            edge_index = checks.plain_index("edge_index", edge_index)
            check_bipartite_edges(edge_index, N_src, N_dst)
        else:
            edge_index = checks.index_tensor("edge_index", edge_index, N_src)
        H, C = self.heads, self.head_dim
        q = self.lin_q(x_dst).view(-1, H, C)
        k = self.lin_k(x_src).view(-1, H, C)
        v = self.lin_v(x_src).view(-1, H, C)
        src, dst = edge_index[0], edge_index[1]
        s = (q[dst] * k[src]).sum(-1) / math.sqrt(C)
        mask = score_mask(self, edge_index.shape[1])
        if mask is None:
            alpha = edge_attention(s, dst, num_nodes=N_dst)
        else:  # an explainer's mask, before the normalisation (see pyg_lie.nn._explain)
            alpha = masked_edge_attention(s, dst, N_dst, mask)
        out = self.propagate(edge_index, v=v, alpha=F.dropout(alpha, self.dropout, self.training),
                             size=(N_src, N_dst))
        out = out.reshape(-1, self.out_channels)
        return (out, (given, alpha)) if return_attention_weights else out

    def message(self, v_j: Tensor, alpha: Tensor) -> Tensor:
        return v_j * alpha.unsqueeze(-1)

    def explain_message(self, inputs: Tensor, dim_size: Optional[int]) -> Tensor:
        return _explain.explain_message(self, inputs, dim_size)

    def num_score_parameters(self) -> int:
        return sum(p.numel() for p in (*self.lin_q.parameters(), *self.lin_k.parameters()))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"
