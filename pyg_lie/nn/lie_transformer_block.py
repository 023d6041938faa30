r"""A LieTransformer residual block (Hutchinson et al., 2021, Fig. 1).

.. math::

    f \leftarrow f + \mathrm{LieSelfAttention}(\mathrm{LN}(f), g),\qquad
    f \leftarrow f + \mathrm{MLP}(\mathrm{LN}(f))

(pre-LayerNorm). LayerNorm and the pointwise MLP act on every lifted node on
its own, so they are equivariant for the regular representation; the block is
therefore equivariant whenever the attention is. A node without neighbours
keeps its residual value (the attention contributes exactly zero).

On a bipartite graph (``x = (x_src, x_dst)``, ``g = (g_src, g_dst)``, as PyG's
convolutions take them) the attention reads both normalised sides and the residuals
are the targets': ``f_dst <- f_dst + Attn((LN(f_src), LN(f_dst)), g)``, then the MLP
step on ``f_dst``; the output has one row per target.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

from torch import Tensor
from torch.nn import Dropout, LayerNorm, Linear, Module, Sequential, SiLU

from .._checks import positive_int, probability
from ..groups import LieGroup
from ._bipartite import node_pair
from ._deprecation import default_group
from .lie_self_attention import LieSelfAttention

__all__ = ["LieTransformerBlock"]


class LieTransformerBlock(Module):
    """Pre-LayerNorm residual LieSelfAttention + pointwise MLP.

    Args:
        channels: feature size ``C`` (input = output).
        group: the Lie group or its name (give it: leaving it out still means ``"SE2"`` but
            is deprecated, as in :class:`LieSelfAttention`).
        heads: attention heads.
        mlp_ratio: hidden width of the pointwise MLP is ``mlp_ratio * C``.
        dropout: dropout after attention and MLP (training only).
        **attention_kwargs: passed to :class:`LieSelfAttention` (``content``,
            ``location``, ``combine``, ``normalization``, ``kernel_dim``, ``edge_dim``,
            ``explain_mode``, ...).

    Shapes:
        ``x (N, C)``, ``edge_index (2, E)``, ``g (N, m, m)``,
        ``invariants (N, k)`` or ``None``, ``edge_attr (E, edge_dim)`` (with ``edge_dim``)
        -> ``(N, C)``, and with ``return_attention_weights=True`` ``(out, (edge_index,
        w (E, H)))``, the attention's weights. Bipartite: ``x``, ``g`` and ``invariants`` as
        pairs ``(source, target)`` -> ``(N_dst, C)``.

    Example:
        >>> import torch
        >>> from pyg_lie.groups import SE2
        >>> from pyg_lie.nn import LieTransformerBlock
        >>> _ = torch.manual_seed(0)
        >>> block = LieTransformerBlock(8, "SE2", heads=2)
        >>> g, x = SE2().random(4), torch.randn(4, 8)
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 0]])
        >>> block(x, edge_index, g).shape
        torch.Size([4, 8])
    """

    def __init__(self, channels: int, group: Union[str, LieGroup, None] = None, heads: int = 4,
                 mlp_ratio: float = 2.0, dropout: float = 0.0, **attention_kwargs):
        super().__init__()
        self.channels = positive_int("channels", channels)
        if not (isinstance(mlp_ratio, (int, float)) and 0 < mlp_ratio < math.inf):
            raise ValueError(f"mlp_ratio must be a finite number > 0, got {mlp_ratio!r}")
        self.norm1 = LayerNorm(channels)
        self.attn = LieSelfAttention(channels, channels, default_group("LieTransformerBlock", group), heads,
                                     **attention_kwargs)
        self.norm2 = LayerNorm(channels)
        hidden = max(1, int(round(mlp_ratio * channels)))
        self.mlp = Sequential(Linear(channels, hidden), SiLU(), Linear(hidden, channels))
        self.drop = Dropout(probability("dropout", dropout))

    def reset_parameters(self) -> None:
        self.norm1.reset_parameters()
        self.norm2.reset_parameters()
        self.attn.reset_parameters()
        for mod in self.mlp:
            if isinstance(mod, Linear):
                mod.reset_parameters()

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]], edge_index: Tensor,
                g: Union[Tensor, Tuple[Tensor, Tensor]], invariants=None, edge_attr: Optional[Tensor] = None,
                rel_log: Optional[Tensor] = None, csr=None, return_attention_weights: Optional[bool] = None):
        x_src, x_dst, bipartite = node_pair("x", x)
        h = (self.norm1(x_src), self.norm1(x_dst)) if bipartite else self.norm1(x)
        a = self.attn(h, edge_index, g, invariants, edge_attr=edge_attr, rel_log=rel_log, csr=csr,
                      return_attention_weights=return_attention_weights)
        a, weights = a if return_attention_weights else (a, None)
        x = x_dst + self.drop(a)
        x = x + self.drop(self.mlp(self.norm2(x)))
        return (x, weights) if return_attention_weights else x

    def __repr__(self) -> str:
        a = self.attn
        return (f"{self.__class__.__name__}({self.channels}, group={a.group.name}, heads={a.heads}, "
                f"normalization={a.normalization!r})")
