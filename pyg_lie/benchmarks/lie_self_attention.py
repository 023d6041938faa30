"""``pyg-lie bench lie-self-attention``: sparse LieSelfAttention vs dense vs TransformerConv.

(filled in below)
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

def dense_lie_self_attention(layer, x: Tensor, g: Tensor, adj: Tensor,
                             invariants: Optional[Tensor] = None) -> Tensor:
    r"""The same layer computed densely over all pairs, as the official code does.

    Uses ``layer``'s parameters; supports ``content="dot_product"``,
    ``location="mlp"`` and ``combine in {"additive", "multiplicative"}``.

    Args:
        x: ``(B, M, C)`` lifted features of ``B`` equally sized clouds.
        g: ``(B, M, m, m)`` group elements.
        adj: ``(B, M, M)`` bool, ``adj[b, i, j]`` = edge ``j -> i``.
        invariants: ``(B, M, k)`` orbit invariants or ``None``.

    Returns:
        ``(B, M, C_out)``; memory and time ``O(B M^2 (H + kernel_dim))``.
    """
    if layer.content != "dot_product" or layer.location != "mlp" or layer.combine == "mlp":
        raise ValueError("the dense reference implements dot_product / mlp / additive|multiplicative only")
    B, M, _ = x.shape
    H, D = layer.heads, layer.head_dim
    q = layer.lin_q(x).view(B, M, H, D)
    k = layer.lin_k(x).view(B, M, H, D)
    v = layer.lin_v(x).view(B, M, H, D)
    G = layer.group
    rel = G.log(G.between(g.unsqueeze(2), g.unsqueeze(1)))  # [b, i, j] = log(g_i^-1 g_j)
    if layer.invariant_dim > 0:
        kk = invariants.size(-1)
        rel = torch.cat([rel, invariants.unsqueeze(2).expand(B, M, M, kk),
                         invariants.unsqueeze(1).expand(B, M, M, kk)], -1)
    kl = layer.loc_mlp(rel.to(x.dtype))  # (B, M, M, H)
    kc = torch.einsum("bihd,bjhd->bijh", q, k) / math.sqrt(D)
    score = kc + kl if layer.combine == "additive" else kc * kl
    mask = adj.unsqueeze(-1)
    if layer.normalization == "softmax":
        w = score.masked_fill(~mask, float("-inf")).softmax(dim=2)
        w = torch.nan_to_num(w, nan=0.0)
    else:
        deg = adj.sum(2, keepdim=True).clamp(min=1).unsqueeze(-1)
        w = score * mask / deg
    out = torch.einsum("bijh,bjhd->bihd", w, v).reshape(B, M, H * D)
    return layer.lin_out(out)
