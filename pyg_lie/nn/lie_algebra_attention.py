r"""Lie-algebra attention: tokens that *are* group elements.

Implements the attention of Musialski, "The Token Is a Group Element: On
Lie-Algebra Attention over Matrix Lie Groups" (arXiv 2606.20547, 2026) as a PyG
:class:`~torch_geometric.nn.conv.MessagePassing` layer.

Every node ``i`` carries a group element ``g_i`` ``(m, m)`` and an invariant
hidden state ``h_i``. For an edge ``j -> i`` the relative pose

.. math::  w_{ij} = \operatorname{vee}\log(g_i^{-1} g_j) \in \mathbb{R}^{\dim G}

is invariant under the diagonal left action ``g_k -> a g_k``. The score is

* ``closed_form`` (model *G* of the paper):
  ``s_ij^h = -(1 / tau_h) sum_b lambda_{h,b} ||w_ij[b]||^2`` over the algebra
  blocks ``b`` of ``group.blocks``, with ``lambda = softplus(raw)``,
  ``tau = softplus(raw)``, ``raw`` initialised at 0 (so ``lambda = tau = log 2``);
  ``heads * (len(blocks) + 1)`` parameters;
* ``mlp`` (model *C*): ``s_ij^h = MLP_h(w_ij)``, one ``dim -> kernel_dim -> 1``
  SiLU MLP per head (``heads * (dim * k + 2 k + 1)`` parameters).

The attention ``alpha_ij^h`` is the softmax of ``s_ij^h`` over the incoming
edges of ``i`` (:func:`pyg_lie.nn.attention_core.edge_attention`); the value
pathway carries direction: ``v_ij^h = W_V^h [h_j ; w_ij]`` and
``out_i^h = sum_j alpha_ij^h v_ij^h``. Because ``h`` and ``w`` are invariant,
so is the output.

Chart. ``log`` is the principal logarithm. SO(2)/SE(2) (atan2 in ``(-pi, pi]``)
and SO(3)/SE(3) (angle ``pi`` convention of the group) have a log for every
element; the closed-form score is continuous there because ``||w||`` does not
depend on the sign of the rotation axis at angle ``pi`` (the value pathway
does). Affine groups have a real principal log only when the linear part has no
eigenvalue on ``(-inf, 0]``; such groups set ``has_chart_boundary``. With
``chart="mask"`` (default) an out-of-chart edge is dropped from the softmax and
from the sum (its ``w`` is replaced by 0, its score by a very negative number and
its weight by 0) and a ``RuntimeWarning`` is issued; a node whose edges are all
masked receives a zero aggregate. With ``chart="error"`` a ``ValueError`` is
raised. Never NaN.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.dense.linear import Linear

from .. import _checks as checks
from .._checks import positive_int
from ..groups import LieGroup, get_group
from ..groups.base import CHART_MODES, chart_safe_log
from ..ops import CSRStructure, csr_aggregate, to_edge_order
from . import _explain
from ._deprecation import renamed
from ._bipartite import check_bipartite_edges, node_pair, same_form
from ._edge_features import edge_score
from ._explain import check_explain_mode, explain_mask, masked_edge_attention
from .attention_core import edge_attention

SCORES = ("closed_form", "mlp")
def relative_log(group: LieGroup, g: Tensor, edge_index: Tensor,
                 chart: str = "mask") -> Tuple[Tensor, Optional[Tensor]]:
    r"""Per-edge ``w_ij = vee(log(g_i^{-1} g_j))`` and chart validity.

    Groups without a chart boundary use the shared :meth:`LieGroup.relative_log`
    directly; groups with ``has_chart_boundary`` (affine groups) go through
    :func:`chart_safe_log`.

    Args:
        group: the group.
        g: ``(N, m, m)`` node elements.
        edge_index: ``(2, E)``, row 0 = source ``j``, row 1 = target ``i``.
        chart: ``"mask"`` or ``"error"`` (see :func:`chart_safe_log`).

    Returns:
        ``w (E, dim)`` and ``valid (E,)`` bool or ``None``.

    For a bipartite graph pass the concatenated elements ``torch.cat([g_src, g_dst])`` and the
    edges with the targets shifted by ``N_src`` (``edge_index[1] + N_src``), as the layer does.
    """
    if not group.has_chart_boundary:
        return group.relative_log(g, edge_index), None
    rel = group.between(g[edge_index[1]], g[edge_index[0]])
    return chart_safe_log(group, rel, chart)


class LieAlgebraAttention(MessagePassing):
    r"""Multi-head attention whose score depends only on ``log(g_i^{-1} g_j)``.

    .. math::
        \alpha_{ij}^h = \operatorname{softmax}_{j \in N(i)} s^h(w_{ij}),\qquad
        \mathbf{out}_i^h = \sum_{j} \alpha_{ij}^h\, W_V^h [h_j ; w_{ij}]

    ``out_channels`` is always the output width, as in every layer of the library.

    Args:
        in_channels: size of ``h``.
        out_channels: output width ``C_out``. With ``concat=True`` the heads split it
            (each head has width ``C_out / H``, so ``heads`` must divide it); with
            ``concat=False`` every head has width ``C_out`` and the output is their mean.
        group: a :class:`~pyg_lie.groups.LieGroup` or its name (``"SE2"``, ...).
        heads: number of heads ``H``.
        concat: concatenate the heads or average them (see ``out_channels``).
        score: ``"closed_form"`` (model G) or ``"mlp"`` (model C).
        kernel_dim: hidden width of the ``mlp`` score (paper: 32).
        dropout: dropout on the attention weights.
        bias: bias of the value projection.
        chart: out-of-chart behaviour, ``"mask"`` or ``"error"`` (module docstring).
        edge_dim: width of optional edge features ``edge_attr (E, edge_dim)`` (``None``: none).
            As in PyG's ``TransformerConv`` they enter the score: ``s_ij^h + W_e^h e_ij``, a
            learned linear map to one scalar per head. The layer stays invariant when
            ``edge_attr`` is invariant (e.g. link types or distances).
        explain_mode: where PyG's explainer edge mask acts: ``"score"`` (default; a log-bias on
            the scores, so a 0/1 mask equals removing the edges) or ``"message"`` (it multiplies
            the messages after the softmax, PyG's default; every edge gets a score, a target's
            only incoming edge included). See :mod:`pyg_lie.nn._explain`.

    Shapes:
        - input: ``x (N, in_channels)`` (the invariant states ``h``), ``edge_index (2, E)``,
          ``g (N, m, m)``, optionally ``edge_attr (E, edge_dim)`` (``(E,)`` when
          ``edge_dim=1``), ``rel_log (E, dim)`` precomputed by :func:`relative_log` (shared by
          all layers of a model; ``w`` is its deprecated name) and ``valid (E,)``.
        - bipartite (sources and targets are different node sets, as in PyG's convolutions and
          :func:`~torch_geometric.nn.to_hetero`): ``x = (x_src, x_dst)`` (``x_dst`` may be
          ``None``: the values come from the sources, the score from ``w`` alone) and
          ``g = (g_src (N_src, m, m), g_dst (N_dst, m, m))``; ``w_ij = vee log(g_dst[i]^-1 g_src[j])``.
        - output: ``(N, out_channels)`` (bipartite: ``(N_dst, out_channels)``), and with
          ``return_attention_weights=True`` also ``(edge_index, alpha (E, H))``.

    ``forward``'s fourth positional argument is ``edge_attr`` here but ``invariants`` in
    :class:`~pyg_lie.nn.LieSelfAttention`; this layer takes no orbit invariants (its tokens
    are group elements, on which the group acts transitively). Pass ``edge_attr=`` by keyword
    to call both layers alike.

    Example:
        >>> import torch
        >>> from pyg_lie.groups import SE3
        >>> from pyg_lie.nn import LieAlgebraAttention
        >>> _ = torch.manual_seed(0)
        >>> layer = LieAlgebraAttention(8, 8, "SE3", heads=2)
        >>> g, x = SE3().random(6), torch.randn(6, 8)  # tokens: group elements with hidden states
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 4, 5, 0, 0]])
        >>> out = layer(x, edge_index, g)
        >>> out.shape
        torch.Size([6, 8])
        >>> u = SE3().random(1)  # the output is invariant under g -> u g
        >>> torch.allclose(layer(x, edge_index, u @ g), out, atol=1e-5)
        True
    """

    def __init__(self, in_channels: int, out_channels: int, group: Union[str, LieGroup],
                 heads: int = 1, concat: bool = True, score: str = "closed_form",
                 kernel_dim: int = 32, dropout: float = 0.0, bias: bool = True,
                 chart: str = "mask", edge_dim: Optional[int] = None, *, explain_mode: str = "score",
                 **kwargs) -> None:
        kwargs.setdefault("aggr", "add")
        super().__init__(node_dim=0, **kwargs)
        in_channels, out_channels = positive_int("in_channels", in_channels), positive_int("out_channels", out_channels)
        heads, kernel_dim = positive_int("heads", heads), positive_int("kernel_dim", kernel_dim)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r} "
                             "(the vector-token baseline is pyg_lie.models.VectorTokenTransformer)")
        if not isinstance(concat, bool):
            raise ValueError(f"concat must be True or False, got {concat!r}")
        if concat and out_channels % heads:
            raise ValueError(f"out_channels ({out_channels}) must be divisible by heads ({heads}): with "
                             f"concat=True the heads split the output width; choose out_channels = heads * "
                             f"head width, or concat=False (every head of width out_channels, averaged)")
        if chart not in CHART_MODES:
            raise ValueError(f"chart must be one of {CHART_MODES}, got {chart!r}")
        dropout = checks.probability("dropout", dropout)
        self.group = get_group(group)
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        #: width of each head's output
        self.head_dim = out_channels // heads if concat else out_channels
        self.concat, self.score, self.kernel_dim = concat, score, kernel_dim
        self.dropout, self.chart = dropout, chart
        self.explain_mode = check_explain_mode(explain_mode)
        self.edge_dim = None if edge_dim is None else positive_int("edge_dim", edge_dim)
        dim = self.group.dim
        blocks = list(self.group.blocks.values())
        # (dim, B) 0/1 matrix: ||w[b]||^2 = (w * w) @ block_matrix
        bm = torch.zeros(dim, len(blocks))
        for b, sl in enumerate(blocks):
            bm[sl, b] = 1.0
        if not bool((bm.sum(1) == 1).all()):
            raise ValueError(f"{self.group.name}.blocks must partition the {dim} algebra coordinates")
        self.register_buffer("block_matrix", bm, persistent=False)

        if score == "closed_form":
            self.lambda_raw = Parameter(torch.empty(heads, len(blocks)))
            self.tau_raw = Parameter(torch.empty(heads))
        else:
            k = kernel_dim
            self.kernel_w1 = Parameter(torch.empty(heads, dim, k))
            self.kernel_b1 = Parameter(torch.empty(heads, k))
            self.kernel_w2 = Parameter(torch.empty(heads, k))
            self.kernel_b2 = Parameter(torch.empty(heads))
        self.lin_value = Linear(in_channels + dim, heads * self.head_dim, bias=bias,
                                weight_initializer="glorot")
        # no bias: a constant per head would only shift every score of a target alike
        self.lin_edge = (Linear(self.edge_dim, heads, bias=False, weight_initializer="glorot")
                         if self.edge_dim is not None else None)
        self.reset_parameters()

    # ------------------------------------------------------------------ params
    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.score == "closed_form":
            torch.nn.init.zeros_(self.lambda_raw)  # softplus(0) = log 2 ~ 0.69
            torch.nn.init.zeros_(self.tau_raw)
        else:
            d, k = self.group.dim, self.kernel_dim
            for p, fan_in in ((self.kernel_w1, d), (self.kernel_b1, d),
                              (self.kernel_w2, k), (self.kernel_b2, k)):
                bound = 1.0 / math.sqrt(fan_in)
                torch.nn.init.uniform_(p, -bound, bound)
        self.lin_value.reset_parameters()
        if self.lin_edge is not None:
            self.lin_edge.reset_parameters()

    def score_parameters(self) -> list[Parameter]:
        """The parameters of the score (paper's "score parameters"; with ``edge_dim``, the edge
        term's map too)."""
        edge = [] if self.lin_edge is None else [self.lin_edge.weight]
        if self.score == "closed_form":
            return [self.lambda_raw, self.tau_raw, *edge]
        return [self.kernel_w1, self.kernel_b1, self.kernel_w2, self.kernel_b2, *edge]

    def num_score_parameters(self) -> int:
        return sum(p.numel() for p in self.score_parameters())

    @property
    def block_weights(self) -> Tensor:
        """``lambda (H, B)`` of the closed-form score (softplus of the raw parameters)."""
        return F.softplus(self.lambda_raw)

    @property
    def temperature(self) -> Tensor:
        """``tau (H,)`` of the closed-form score."""
        return F.softplus(self.tau_raw)

    # ------------------------------------------------------------------- score
    def compute_score(self, w: Tensor) -> Tensor:
        r"""Scores ``(E, H)`` from relative logs ``w (E, dim)``."""
        if self.score == "closed_form":
            sq = (w * w) @ self.block_matrix.to(w.dtype)  # (E, B)
            return -(sq @ self.block_weights.t()) / self.temperature
        hid = F.silu(torch.einsum("ed,hdk->ehk", w, self.kernel_w1) + self.kernel_b1)
        return (hid * self.kernel_w2).sum(-1) + self.kernel_b2

    # ----------------------------------------------------------------- forward
    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                g: Union[Tensor, Tuple[Tensor, Tensor]], edge_attr: Optional[Tensor] = None,
                return_attention_weights: Optional[bool] = None,
                w: Optional[Tensor] = None, valid: Optional[Tensor] = None, *, rel_log: Optional[Tensor] = None):
        """Attend over ``edge_index`` (row 0 = source ``j``, row 1 = target ``i``); see the class
        docstring for shapes.

        The fourth positional argument is ``edge_attr`` (unlike
        :class:`~pyg_lie.nn.LieSelfAttention`, whose fourth is ``invariants``). ``rel_log (E,
        dim)`` passes the relative logs ``w_ij`` precomputed by :func:`relative_log` (with its
        ``valid``), the name LieSelfAttention uses; ``w`` is its deprecated spelling
        (``DeprecationWarning``; both given is a ``ValueError``).
        """
        w = renamed("LieAlgebraAttention.forward", "w", "rel_log", w, rel_log)
        x, x_dst, bipartite = node_pair("x", x)
        same_form("g", g, bipartite)
        checks.node_features("x[0] (x_src)" if bipartite else "x", x, self.in_channels, self.lin_value.weight)
        given = edge_index
        checks.edge_index(edge_index)
        if bipartite:
            g_src, g_dst, _ = node_pair("g", g)
            N_src, N_dst = x.size(0), (g_dst.shape[0] if isinstance(g_dst, Tensor) else 0)
            if x_dst is not None:
                checks.node_features("x[1] (x_dst)", x_dst, self.in_channels, self.lin_value.weight)
                N_dst = x_dst.size(0)
            checks.group_elements(self.group, g_src, N_src, members=w is None)
            checks.group_elements(self.group, g_dst, N_dst, members=w is None)
            edge_index = checks.plain_index("edge_index", edge_index)
            check_bipartite_edges(edge_index, N_src, N_dst)
        else:
            N_src = N_dst = x.size(0)
            # EdgeIndex / Index: a plain int64 tensor, every index a node
            edge_index = checks.index_tensor("edge_index", edge_index, x.size(0))
            checks.group_elements(self.group, g, x.size(0), members=w is None)
        if w is None and bipartite:  # on the concatenated node set: the homogeneous layer's numbers
            shifted = torch.stack([edge_index[0], edge_index[1] + N_src])
            w, valid = relative_log(self.group, torch.cat([g_src, g_dst]), shifted, self.chart)
        elif w is None:
            w, valid = relative_log(self.group, g, edge_index, self.chart)
        elif w.shape != (edge_index.shape[1], self.group.dim):
            raise ValueError(f"rel_log must have shape (E, {self.group.dim}) = "
                             f"({edge_index.shape[1]}, {self.group.dim}), got {tuple(w.shape)}; "
                             "compute it with pyg_lie.nn.lie_algebra_attention.relative_log")
        w = w.to(x.dtype)
        if valid is not None:
            w = torch.where(valid[:, None], w, torch.zeros_like(w))
        s = self.compute_score(w)  # (E, H)
        escore = edge_score(self.lin_edge, edge_attr, edge_index.shape[1], x)
        if escore is not None:
            s = s + escore
        if valid is not None:
            s = torch.where(valid[:, None], s, torch.full_like(s, -1e30 if s.dtype != torch.float16 else -6e4))
        # W_V [h_j ; w_ij] = W_h h_j + b + W_w w_ij: the h part once per node, not per edge
        W = self.lin_value.weight
        hv = F.linear(x, W[:, :self.in_channels], self.lin_value.bias)
        mask = explain_mask(self, edge_index.shape[1])
        if mask is None:
            out, alpha = self._attend_csr(edge_index, s, hv, w, valid, N_dst)
        else:  # an explainer's mask (see pyg_lie.nn._explain); PyG message passing
            if check_explain_mode(self.explain_mode) == "score":  # before the normalisation
                alpha = masked_edge_attention(s, edge_index[1], N_dst, mask)
            else:  # the messages: explain_message
                alpha = edge_attention(s, edge_index[1], N_dst)
            if valid is not None:
                alpha = alpha * valid[:, None].to(alpha.dtype)
            alpha_drop = F.dropout(alpha, p=self.dropout, training=self.training)
            out = self.propagate(edge_index, hv=hv, w=w, alpha=alpha_drop, size=(N_src, N_dst))  # (N, H, C)
        out = out.reshape(-1, self.out_channels) if self.concat else out.mean(1)
        if return_attention_weights:
            return out, (given, alpha)
        return out

    def _attend_csr(self, edge_index: Tensor, s: Tensor, hv: Tensor, w: Tensor,
                    valid: Optional[Tensor], num_dst: Optional[int] = None) -> Tuple[Tensor, Tensor]:
        """The attention on the engine's target-sorted edges: softmax of the scores ``s (E, H)``,
        ``sum_j alpha_ij (W_h h_j + b)`` as one sparse product, and the relative-pose part of the
        values as ``W_w (sum_j alpha_ij w_ij)`` (the sum in the algebra's ``dim`` coordinates, then
        one map per head). Returns ``(out (N, H, C), alpha (E, H))`` in the given edge order. A
        bipartite graph has ``num_dst`` targets and the ``hv.shape[0]`` sources."""
        N_src, H, C = hv.shape[0], self.heads, self.head_dim
        N = N_src if num_dst is None else num_dst
        csr = CSRStructure.build(edge_index, N, num_sources=N_src)
        if csr.perm is not None:
            s, w = s.index_select(0, csr.perm), w.index_select(0, csr.perm)
            valid = None if valid is None else valid.index_select(0, csr.perm)
        alpha = edge_attention(s, csr.row, N, ptr=csr.crow, degree=csr.degree, validate=False)
        if valid is not None:
            alpha = alpha * valid[:, None].to(alpha.dtype)
        alpha_drop = F.dropout(alpha, p=self.dropout, training=self.training)
        out = csr_aggregate(csr, alpha_drop.t().contiguous(), hv.view(N_src, H, C)).view(N, H, C)
        aw = alpha_drop.unsqueeze(-1) * w.unsqueeze(1)  # (E, H, dim)
        aw = torch.zeros(N, H, w.shape[-1], dtype=aw.dtype, device=aw.device).index_add_(0, csr.row, aw)
        W_w = self.lin_value.weight[:, self.in_channels:].view(H, C, -1)
        out = out + torch.einsum("nhd,hcd->nhc", aw, W_w)
        return out, to_edge_order(csr, alpha)

    def message(self, hv_j: Tensor, w: Tensor, alpha: Tensor) -> Tensor:
        v = hv_j + F.linear(w, self.lin_value.weight[:, self.in_channels:])
        return v.view(-1, self.heads, self.head_dim) * alpha.unsqueeze(-1)

    def explain_message(self, inputs: Tensor, dim_size: Optional[int]) -> Tensor:
        # "score" mode: the explainer's edge mask already acted on the scores (see pyg_lie.nn._explain)
        return _explain.explain_message(self, inputs, dim_size)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"heads={self.heads}, group={self.group.name}, score={self.score}"
                f"{'' if self.concat else ', concat=False'}"
                f"{'' if self.edge_dim is None else f', edge_dim={self.edge_dim}'})")
