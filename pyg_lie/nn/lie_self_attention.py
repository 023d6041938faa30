r"""LieSelfAttention (Hutchinson et al., 2021, Algorithm 1 and Appendix E) as a PyG layer.

Nodes are *lifted* points: node ``i`` carries features ``f_i`` and a group
element ``g_i``. For every edge ``j -> i`` and head ``h``

.. math::

    \alpha^h_{ij} = F\big(k_c^h(f_i, f_j),\; k_l^h(g_i^{-1} g_j)\big),\qquad
    w^h_{ij} = \operatorname{norm}_{j \in \mathcal N(i)} \alpha^h_{ij},\qquad
    f^{out}_i = W^O \big\Vert_h \sum_{j \in \mathcal N(i)} w^h_{ij} W^{V,h} f_j .

Options (names of the paper's Appendix E):

* content ``k_c``: ``"dot_product"`` ``(W^Q f_i)^T (W^K f_j) / sqrt(d_h)`` per head,
  or ``"linear_concat_linear"`` ``W [W^Q f_i ; W^K f_j]`` (computed as
  ``W_1 W^Q f_i + W_2 W^K f_j`` on nodes, so it costs nothing per edge).
* location ``k_l``: ``"mlp"``, an MLP (``kernel_layers`` layers of width
  ``kernel_dim``, SiLU) on ``vee(log(g_i^{-1} g_j))`` concatenated with the orbit
  invariants of both ends (``invariants``, e.g. the radius for SO(n)), shared by the
  heads (one output per head) or, with ``kernel_per_head=True``, one MLP per head as in
  the official code (``H`` times the work); or ``"identity"``, those coordinates
  themselves (only with ``combine="mlp"``).
* combination ``F``: ``"additive"`` ``k_c + k_l``, ``"multiplicative"``
  ``k_c k_l``, ``"mlp"`` ``MLP([k_c ; k_l])`` (then ``k_c`` and ``k_l`` may be
  vectors).
* normalisation: ``"softmax"`` over ``j in N(i)`` or ``"constant"`` (alias ``"mean"``, the name
  other layers use) ``alpha_ij / |N(i)|`` (the paper's choice for Hamiltonian dynamics).
* edge features (beyond the paper, as in PyG's ``TransformerConv``): with ``edge_dim`` set,
  ``edge_attr (E, edge_dim)`` adds ``W_e^h e_ij`` (a learned linear map to one scalar per head)
  to the combined score, ``alpha^h_ij = F(k_c^h, k_l^h) + W_e^h e_ij``. The layer stays
  equivariant when ``edge_attr`` is invariant (for example distances between the points).

Everything lives on edges: memory is ``O(E (heads + d))`` with ``E`` the number
of edges, never ``O(N^2)``. ``g_i^{-1} g_j`` is invariant to ``g -> u g`` for
every ``u``, so the layer is exactly equivariant under the left action on the
lifted nodes. A node without incoming edges receives zero (no NaN); inside a
residual block it keeps its residual value.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Linear, Module, Sequential, SiLU
from torch_geometric.nn import MessagePassing

from .. import _checks as checks
from .._checks import nonnegative_int, positive_int, probability
from .._tracing import tracing
from ..groups import LieGroup, get_group
from ..ops import CSRStructure, csr_scores, to_edge_order
from . import _explain
from ._deprecation import default_group
from ._bipartite import bipartite_relative_log, check_bipartite_edges, node_pair, same_form
from ._edge_mlp import HeadwiseMLP, edge_mlp
from ._edge_features import edge_score
from ._explain import check_explain_mode, explain_mask, masked_edge_attention
from .attention_core import csr_edge_attention, csr_softmax_attention, edge_attention

__all__ = ["LieSelfAttention", "CONTENT", "LOCATION", "COMBINE", "NORMALIZATION"]

PairTensor = Tuple[Tensor, Tensor]

CONTENT = ("dot_product", "linear_concat_linear")
LOCATION = ("mlp", "identity")
COMBINE = ("additive", "mlp", "multiplicative")
NORMALIZATION = ("softmax", "constant")


def _mlp(in_dim: int, hidden: int, out_dim: int, layers: int) -> Module:
    """``layers`` linear maps with SiLU in between (``layers >= 1``)."""
    mods = []
    d = in_dim
    for _ in range(layers - 1):
        mods += [Linear(d, hidden), SiLU()]
        d = hidden
    mods.append(Linear(d, out_dim))
    return Sequential(*mods)


def _choice(value: str, options: Tuple[str, ...], arg: str) -> str:
    if value not in options:
        raise ValueError(f"{arg} must be one of {options}, got {value!r}")
    return value


class LieSelfAttention(MessagePassing):
    r"""Multi-head LieSelfAttention on lifted nodes (see the module docstring).

    Args:
        in_channels: input feature size ``C_in``.
        out_channels: output feature size ``C_out`` (default ``C_in``); must be
            divisible by ``heads``.
        group: the Lie group (object or name such as ``"SE2"``). Give it always, as
            :class:`~pyg_lie.nn.LieAlgebraAttention` requires it: leaving it out still means
            ``"SE2"`` but is deprecated (``DeprecationWarning``).
        heads: number of heads ``H``.
        content, location, combine, normalization: see the module docstring.
        kernel_dim: width of the location MLP (the paper's "kernel dimension").
        kernel_layers: number of linear maps of the location MLP.
        kernel_per_head: one location MLP per head (``in -> kernel_dim -> ... -> 1``,
            the official code's ``MultiheadWeightNet``) instead of one shared MLP with
            ``H`` outputs; needs ``location="mlp"`` and ``combine`` ``"additive"`` or
            ``"multiplicative"``.
        invariant_dim: number ``k`` of orbit invariants per node passed in
            ``invariants`` (0 when the group acts transitively).
        dropout: dropout on the attention weights (training only).
        bias: bias of the value projection.
        edge_dim: width of ``edge_attr`` (``None``: the layer takes no edge features). Its
            score term is one more per-edge, per-head score, so the fused kernels keep
            running with it.
        fused: ``"auto"`` (default), ``True`` or ``False``: which graph path runs (not which
            kernel: :mod:`pyg_lie.ops` chooses those). The CSR path computes the dot-product
            scores and the weighted sums on the graph's :class:`pyg_lie.ops.CSRStructure`,
            so no ``(E, d)`` tensor is ever formed (memory ``O(E heads)``); it has exact
            first and second derivatives; its kernels are custom operators, so
            ``torch.compile`` calls them as they are. ``"auto"`` and ``True`` use it,
            ``False`` runs the generated ``MessagePassing.propagate`` path instead. On it,
            the official architecture's attention (dot-product content, one location score
            per head, additive, softmax, no dropout at work) is one call,
            :func:`pyg_lie.ops.csr_softmax_attention`, fused where a kernel takes it.
        explain_mode: where PyG's explainer edge mask acts: ``"score"`` (default; a log-bias on
            the scores, so a 0/1 mask equals removing the edges) or ``"message"`` (it multiplies
            the messages after the normalisation, PyG's default; every edge gets a score, a
            target's only incoming edge included). See :mod:`pyg_lie.nn._explain`.

    ``out_channels`` is always the output width (the heads split it).

    Shapes:
        input ``x (N, C_in)``, ``edge_index (2, E)``, ``g (N, m, m)``,
        optional ``invariants (N, k)`` and ``edge_attr (E, edge_dim)``; output ``(N, C_out)``
        and, with ``return_attention_weights=True``, ``(edge_index, w (E, H))``. Bipartite
        (sources and targets are different lifted nodes, as PyG's convolutions and
        :func:`~torch_geometric.nn.to_hetero` pass them): ``x = (x_src (N_src, C_in), x_dst
        (N_dst, C_in))``, ``g = (g_src, g_dst)``, ``invariants = (inv_src, inv_dst)``; queries
        come from the targets, keys and values from the sources, the location term from
        ``g_dst[i]^-1 g_src[j]``; output ``(N_dst, C_out)``.

    ``forward``'s fourth positional argument is ``invariants`` here but ``edge_attr`` in
    :class:`~pyg_lie.nn.LieAlgebraAttention` (whose tokens have no orbit invariants); pass
    ``invariants=`` and ``edge_attr=`` by keyword to call both layers alike.

    Example:
        >>> import torch
        >>> from pyg_lie.groups import SE2
        >>> from pyg_lie.nn import LieSelfAttention
        >>> _ = torch.manual_seed(0)
        >>> layer = LieSelfAttention(8, 16, "SE2", heads=4)
        >>> g = SE2().random(5)  # one group element per (lifted) node
        >>> x = torch.randn(5, 8)
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [1, 2, 3, 4, 0, 2, 0]])
        >>> out, (ei, alpha) = layer(x, edge_index, g, return_attention_weights=True)
        >>> out.shape, alpha.shape
        (torch.Size([5, 16]), torch.Size([7, 4]))
        >>> u = SE2().random(1)  # moving every element by the same u leaves the output unchanged
        >>> torch.allclose(layer(x, edge_index, u @ g), out, atol=1e-5)
        True
    """

    def __init__(self, in_channels: int, out_channels: Optional[int] = None,
                 group: Union[str, LieGroup, None] = None, heads: int = 4, *,
                 content: str = "dot_product", location: str = "mlp", combine: str = "additive",
                 normalization: str = "softmax", kernel_dim: int = 16, kernel_layers: int = 3,
                 kernel_per_head: bool = False, invariant_dim: int = 0, dropout: float = 0.0, bias: bool = True,
                 edge_dim: Optional[int] = None, fused: Union[bool, str] = "auto", explain_mode: str = "score",
                 **kwargs):
        kwargs.setdefault("aggr", "sum")
        super().__init__(node_dim=0, **kwargs)
        out_channels = in_channels if out_channels is None else out_channels
        in_channels, out_channels = positive_int("in_channels", in_channels), positive_int("out_channels", out_channels)
        heads = positive_int("heads", heads)
        kernel_dim, kernel_layers = positive_int("kernel_dim", kernel_dim), positive_int("kernel_layers", kernel_layers)
        if out_channels % heads != 0:
            raise ValueError(f"out_channels ({out_channels}) must be divisible by heads ({heads})")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.head_dim = out_channels // heads
        self.group = get_group(default_group("LieSelfAttention", group))
        self.content = _choice(content, CONTENT, "content")
        self.location = _choice(location, LOCATION, "location")
        self.combine = _choice(combine, COMBINE, "combine")
        normalization = "constant" if normalization == "mean" else normalization  # the other layers' name
        self.normalization = _choice(normalization, NORMALIZATION, "normalization")
        if self.location == "identity" and self.combine != "mlp":
            raise ValueError("location='identity' gives a vector k_l, which needs combine='mlp'")
        self.kernel_dim, self.kernel_layers = kernel_dim, kernel_layers
        if not isinstance(kernel_per_head, bool):
            raise ValueError(f"kernel_per_head must be True or False, got {kernel_per_head!r}")
        if kernel_per_head and (self.location != "mlp" or self.combine == "mlp"):
            raise ValueError("kernel_per_head=True needs location='mlp' and combine 'additive' or "
                             f"'multiplicative' (one scalar per head), got location={self.location!r}, "
                             f"combine={self.combine!r}")
        self.kernel_per_head = kernel_per_head
        self.invariant_dim = nonnegative_int("invariant_dim", invariant_dim)
        self.edge_dim = None if edge_dim is None else positive_int("edge_dim", edge_dim)
        self.dropout = probability("dropout", dropout)
        if fused not in (True, False, "auto"):
            raise ValueError(f"fused must be True, False or 'auto', got {fused!r}")
        self.fused = fused
        self.explain_mode = check_explain_mode(explain_mode)
        self._alpha: Optional[Tensor] = None  # the plain path's weights, cleared before forward returns
        self._features_checked = False  # the identical-features warning looks at the first input only
        H, D = heads, self.head_dim

        self.lin_q = Linear(in_channels, H * D, bias=False)
        self.lin_k = Linear(in_channels, H * D, bias=False)
        self.lin_v = Linear(in_channels, H * D, bias=bias)
        self.lin_out = Linear(H * D, out_channels, bias=False)

        # k_c output width per edge
        if self.content == "dot_product":
            self.content_dim = H
            self.lcl_q = self.lcl_k = None
        else:
            c = kernel_dim if self.combine == "mlp" else H
            self.content_dim = c
            self.lcl_q = Linear(H * D, c, bias=True)
            self.lcl_k = Linear(H * D, c, bias=False)

        self.loc_in = self.group.dim + 2 * self.invariant_dim
        if self.location == "mlp":
            self.location_dim = kernel_dim if self.combine == "mlp" else H
            self.loc_mlp = (HeadwiseMLP(self.loc_in, kernel_dim, H, kernel_layers) if kernel_per_head
                            else _mlp(self.loc_in, kernel_dim, self.location_dim, kernel_layers))
        else:
            self.location_dim = self.loc_in
            self.loc_mlp = None
        if self.combine == "mlp":
            self.combine_mlp = _mlp(self.content_dim + self.location_dim, kernel_dim, H, 2)
        else:
            self.combine_mlp = None
        # no bias: a constant per head would only shift every score of a target alike
        self.lin_edge = Linear(self.edge_dim, H, bias=False) if self.edge_dim is not None else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for mod in self.modules():
            if isinstance(mod, (Linear, HeadwiseMLP)):
                mod.reset_parameters()

    # ----------------------------------------------------------------- forward
    def forward(self, x: Union[Tensor, PairTensor], edge_index: Tensor, g: Union[Tensor, PairTensor],
                invariants: Optional[Union[Tensor, PairTensor]] = None, edge_attr: Optional[Tensor] = None,
                return_attention_weights: Optional[bool] = None, rel_log: Optional[Tensor] = None,
                csr: Optional[CSRStructure] = None):
        """Attend over ``edge_index`` (row 0 = source ``j``, row 1 = target ``i``).

        The fourth positional argument is ``invariants`` (``(N, invariant_dim)``, or a pair when
        bipartite), unlike :class:`~pyg_lie.nn.LieAlgebraAttention`, whose fourth is
        ``edge_attr``: name both by keyword (``invariants=``, ``edge_attr=``) in code that
        calls either layer. ``edge_attr (E, edge_dim)`` (only with ``edge_dim``; ``(E,)`` when ``edge_dim=1``) are
        edge features in the order of ``edge_index``. ``rel_log`` optionally passes
        ``group.relative_log(g, edge_index, one_sided_cut=True)`` ``(E, dim)`` and ``csr`` a
        :class:`pyg_lie.ops.CSRStructure` of ``edge_index``, both precomputed once for a stack of layers on
        the same edges. For a bipartite graph, ``x``, ``g`` and ``invariants`` are pairs
        ``(source, target)`` and ``csr`` is ``CSRStructure.build(edge_index, N_dst,
        num_sources=N_src)``.
        """
        x_src, x_dst, bipartite = node_pair("x", x)
        same_form("g", g, bipartite)
        same_form("invariants", invariants, bipartite)
        g_src, g_dst, _ = node_pair("g", g)
        inv_src, inv_dst, _ = node_pair("invariants", invariants)
        given = edge_index
        checks.edge_index(edge_index)
        edge_index = checks.plain_index("edge_index", edge_index)  # EdgeIndex / Index: a plain int64 tensor
        if not tracing():
            if bipartite:
                self._check(x_src, g_src, inv_src, "[0]", "_src")
                self._check(x_dst, g_dst, inv_dst, "[1]", "_dst")
                check_bipartite_edges(edge_index, x_src.size(0), x_dst.size(0))
            else:
                self._check(x, g, invariants)
            if rel_log is None:  # g is read: its matrices must be group elements
                for gg, xx in ((g_src, x_src), (g_dst, x_dst)) if bipartite else ((g, x),):
                    checks.group_elements(self.group, gg, xx.size(0), members=True)
            if rel_log is not None:
                checks.edge_features("rel_log", rel_log, edge_index.size(1), self.group.dim,
                                     "; pass group.relative_log(g, edge_index, one_sided_cut=True)")
            if csr is not None:
                csr.check(x_dst.size(0), edge_index.size(1), x_src.size(0))
        escore = edge_score(self.lin_edge, edge_attr, edge_index.size(1), x_src)  # (E, H) or None
        if not self._features_checked and checks._reads_values(x_src):
            self._features_checked = True
            self._warn_if_identical(x_src)
        mask = explain_mask(self, edge_index.size(1))
        if self.fused is not False and mask is None:
            return self._forward_fused(x_src, x_dst, bipartite, edge_index, g_src, g_dst, inv_src, inv_dst,
                                       return_attention_weights, rel_log, csr, given, escore)
        if mask is not None and check_explain_mode(self.explain_mode) == "message":
            mask = None  # explain_message applies it to the messages
        H, D = self.heads, self.head_dim
        N_src, N_dst = x_src.size(0), x_dst.size(0)
        q = self.lin_q(x_dst).view(N_dst, H, D)
        k = self.lin_k(x_src).view(N_src, H, D)
        v = self.lin_v(x_src).view(N_src, H, D)

        # location features on edges: vee(log(g_i^-1 g_j)) (+ invariants of both ends)
        loc = self._relative_log(g_src, g_dst, bipartite, edge_index) if rel_log is None else rel_log
        if self.invariant_dim > 0:
            loc = torch.cat([loc, inv_dst[edge_index[1]], inv_src[edge_index[0]]], dim=-1)
        loc = loc.to(x_src.dtype)

        if self.content == "dot_product":
            cq, ck = q, k
        else:
            cq = self.lcl_q(q.reshape(N_dst, H * D))
            ck = self.lcl_k(k.reshape(N_src, H * D))
        out = self.propagate(edge_index, cq=cq, ck=ck, v=v, loc=loc, escore=escore, edge_mask=mask,
                             size=(N_src, N_dst))
        out = self.lin_out(out.reshape(N_dst, H * D))
        alpha, self._alpha = self._alpha, None
        if return_attention_weights:
            return out, (given, alpha)
        return out

    def _relative_log(self, g_src: Tensor, g_dst: Tensor, bipartite: bool, edge_index: Tensor) -> Tensor:
        if bipartite:
            return bipartite_relative_log(self.group, g_src, g_dst, edge_index, one_sided_cut=True)
        return self.group.relative_log(g_src, edge_index, one_sided_cut=True)

    def _forward_fused(self, x_src, x_dst, bipartite, edge_index, g_src, g_dst, inv_src, inv_dst,
                       return_attention_weights, rel_log, csr, given, escore=None):
        H, D = self.heads, self.head_dim
        N_src, N_dst = x_src.size(0), x_dst.size(0)
        if csr is None:
            csr = CSRStructure.build(edge_index, N_dst, num_sources=N_src if bipartite else None)
        perm = csr.perm
        q = self.lin_q(x_dst).view(N_dst, H, D)
        k = self.lin_k(x_src).view(N_src, H, D)
        v = self.lin_v(x_src).view(N_src, H, D)
        dst, src = csr.row, csr.col
        if rel_log is None:
            sorted_ei = edge_index if perm is None else edge_index[:, perm]
            loc = self._relative_log(g_src, g_dst, bipartite, sorted_ei)
        else:
            loc = rel_log if perm is None else rel_log[perm]
        if self.invariant_dim > 0:
            loc = torch.cat([loc, inv_dst[dst], inv_src[src]], dim=-1)
        loc = loc.to(x_src.dtype)
        if escore is not None:  # heads first, in the sorted edge order
            escore = (escore if perm is None else escore[perm]).t()
        if self._one_op_attention():  # scores, softmax and aggregation in one operator
            kl = edge_mlp(self.loc_mlp, loc).t()  # (H, E)
            if escore is not None:  # the edge term rides on the location scores
                kl = (kl + escore).contiguous()
            out, w = csr_softmax_attention(csr, q * (1.0 / math.sqrt(D)), k, v, kl)
            out, alpha = out.reshape(N_dst, H * D), w.t()
        else:
            if self.content == "dot_product":
                kc = csr_scores(csr, q * (1.0 / math.sqrt(D)), k)  # (H, E); q scaled: (N, H, D) < (H, E)
            else:
                kc = (self.lcl_q(q.reshape(N_dst, H * D))[dst] + self.lcl_k(k.reshape(N_src, H * D))[src]).t()
            # kc.t() leads the elementwise combination, so the scores keep its (H, E) memory
            # order, and the sorted-edge normalisation reduces along it
            score = self._score(kc.t(), loc).t()  # (H, E)
            if escore is not None:
                score = score + escore
            out, w = csr_edge_attention(csr, score, v, self.normalization, self.dropout, self.training)
            alpha = w.t()
        out = self.lin_out(out)
        if return_attention_weights:
            return out, (given, to_edge_order(csr, alpha))
        return out

    def _one_op_attention(self) -> bool:
        """True if the attention is :func:`csr_softmax_attention`'s: dot-product content plus
        one location score per head, softmax, no dropout at work."""
        return (self.content == "dot_product" and self.location == "mlp" and self.combine == "additive"
                and self.normalization == "softmax" and not (self.training and self.dropout > 0))

    def _score(self, kc: Tensor, loc: Tensor) -> Tensor:
        """Combine content ``kc (E, .)`` and location ``k_l(loc)`` scores into ``(E, H)``."""
        kl = edge_mlp(self.loc_mlp, loc) if self.loc_mlp is not None else loc  # (E, location_dim)
        if self.combine == "additive":
            return kc + kl
        if self.combine == "multiplicative":
            return kc * kl
        return edge_mlp(self.combine_mlp, torch.cat([kc, kl], dim=-1))

    def message(self, cq_i: Tensor, ck_j: Tensor, v_j: Tensor, loc: Tensor, escore: Optional[Tensor],
                edge_mask: Optional[Tensor], index: Tensor, ptr: Optional[Tensor], size_i: Optional[int]) -> Tensor:
        if self.content == "dot_product":
            kc = (cq_i * ck_j).sum(-1) / math.sqrt(self.head_dim)  # (E, H)
        else:
            kc = cq_i + ck_j  # (E, content_dim)
        score = self._score(kc, loc)
        if escore is not None:
            score = score + escore
        if edge_mask is None:
            w = edge_attention(score, index, size_i, normalization=self.normalization, ptr=ptr)  # (E, H)
        else:  # an explainer's mask, before the normalisation
            w = masked_edge_attention(score, index, size_i, edge_mask, self.normalization)
        self._alpha = w
        if self.training and self.dropout > 0:
            w = torch.nn.functional.dropout(w, p=self.dropout, training=True)
        return w.unsqueeze(-1) * v_j

    def _warn_if_identical(self, x: Tensor) -> None:
        if self.normalization == "softmax" and x.size(0) > 1 and bool((x == x[:1]).all()):
            warnings.warn(f"{type(self).__name__}: the node features x are identical on every node; a softmax "
                          "over identical values returns that value whatever the attention weights, so the "
                          "output does not depend on the positions. Give the nodes informative features "
                          "(for example invariant descriptors of the positions) or use "
                          "normalization='constant'", UserWarning, stacklevel=3)

    def explain_message(self, inputs: Tensor, dim_size: Optional[int]) -> Tensor:
        # "score" mode: the explainer's edge mask already acted on the scores (see pyg_lie.nn._explain)
        return _explain.explain_message(self, inputs, dim_size)

    # ------------------------------------------------------------------ checks
    def _check(self, x: Tensor, g: Tensor, invariants: Optional[Tensor], at: str = "", side: str = "") -> None:
        """Shapes of one side's inputs; ``at`` / ``side`` name the side of a bipartite pair
        (``"[0]"``, ``"_src"``)."""
        if not isinstance(x, Tensor) or x.dim() != 2 or x.size(1) != self.in_channels:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x{at}{f' (x{side})' if at else ''} must have shape (N{side}, {self.in_channels}), "
                             f"got {got}")
        if at:
            try:
                checks.group_elements(self.group, g, x.size(0))
            except ValueError as err:
                raise ValueError(f"g{at} (g{side}): {err}") from None
        else:
            checks.group_elements(self.group, g, x.size(0))
        if self.invariant_dim > 0:
            if invariants is None or invariants.shape != (x.size(0), self.invariant_dim):
                raise ValueError(f"invariants{at} must have shape ({x.size(0)}, {self.invariant_dim}) "
                                 f"(invariant_dim={self.invariant_dim}), got "
                                 f"{None if invariants is None else tuple(invariants.shape)}")
        elif invariants is not None:
            raise ValueError("invariants given but invariant_dim=0; construct the layer with "
                             "invariant_dim=invariants.size(1)")

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
                f"group={self.group.name}, heads={self.heads}, content={self.content!r}, "
                f"location={self.location!r}, combine={self.combine!r}, "
                f"normalization={self.normalization!r}"
                f"{', kernel_per_head=True' if self.kernel_per_head else ''}"
                f"{'' if self.edge_dim is None else f', edge_dim={self.edge_dim}'})")
