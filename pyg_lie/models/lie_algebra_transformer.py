r"""Transformers whose tokens are group elements (Musialski, arXiv 2606.20547).

:class:`LieAlgebraTransformer` (models *G* and *C* of the paper) stacks
:class:`~pyg_lie.nn.LieAlgebraAttention` layers; :class:`VectorTokenTransformer`
(model *A*) is the same transformer with ordinary vector tokens (flattened
matrices) and scaled dot-product attention, which is *not* equivariant.

Architecture (identical for all three models, paper: 3 layers, 4 heads, hidden 32)::

    h^0_i = t (+ W_x x_i)                       t: learned constant, zero-initialised (G, C)
    h^0_i = t + W_g vec(g_i) (+ W_x x_i)         (A)
    for each layer:  h <- LN(h + W_O Attn(h))
                     h <- LN(h + FFN(h))        FFN: Linear-GELU-Linear (2x width)
    delta_i = W_delta h_i + sum_j gamma(h_i, h_j) w_ij   in the algebra (per-token output)
    p_i     = g_i exp(delta_i)                  (N, m, m)

Initial hidden states (G, C): tokens carry no payload, so every token starts from
the *same* learned vector ``t``; all geometry enters through ``w_ij`` in the
scores and the value pathway, hence every ``h`` is invariant. An optional
invariant node feature ``x (N, in_channels)`` (beyond the paper: e.g. residue or
link types of frames in a point cloud) is added through a linear map; it must be
invariant for the model to stay equivariant.

The relative term ``sum_j gamma_ij w_ij`` (``gamma``: a small MLP on
``[h_i ; h_j]``, zero-initialised) expresses the correction in the tokens' own
relative poses, so its scale follows the data exactly (A has no ``w_ij`` and uses
``W_delta h_i`` only). ``delta_i`` is invariant, so the output is equivariant.

Completion head (equivariant): every token ``i`` proposes the missing element
``p_i = g_i exp(delta_i)`` *relative to itself*. An invariant confidence
``c_i = W_c h_i`` gives pooling weights ``a_i = softmax_{i in seq} c_i``; the
anchor ``r`` of a sequence is its token of largest weight and the prediction is
the one-step weighted Frechet mean around it,

.. math:: \hat g = p_r \exp\Big(\sum_i a_i \log(p_r^{-1} p_i)\Big).

With ``head="pair"`` every pair ``j -> i`` (``i != j``) proposes a point on their
geodesic, ``q_ij = g_i exp(c_ij w_ij)`` with ``c_ij = 1/2 + MLP([h_i ; h_j ; vee(w_ij)])``,
and the same pooling runs over pairs with weights ``beta_ij = softmax_seq(b tanh(s_ij / b))``
(``s_ij`` from the same MLP; bounded logits, ``b = pair_logit_bound``, keep the selection
trainable); ``head="midpoint"`` fixes ``c_ij = 1/2``. For sequences ``g_0 exp(k xi)`` the midpoint of any pair symmetric
about the gap *is* the missing element, so the network only chooses pairs.

Under ``g_k -> b g_k`` all ``h``, ``delta``, ``a`` and ``p_r^{-1} p_i`` are
invariant and ``p_i -> b p_i``, so ``\hat g -> b \hat g``: the model is exactly
equivariant (for A the features are not invariant, so it is not). The relative
poses of the outputs ``p_i^{-1} p_j = exp(-delta_i) g_i^{-1} g_j exp(delta_j)``
satisfy the cocycle condition by construction.

Relative logs ``w_ij`` are computed once per forward
(:func:`pyg_lie.nn.lie_algebra_attention.relative_log`) and shared by all layers.

Where the parts live: the graphs (:func:`~pyg_lie.neighbors.complete_graph`,
:func:`~pyg_lie.neighbors.log_knn_graph`, :func:`~pyg_lie.neighbors.log_radius_graph`) in
:mod:`pyg_lie.neighbors`, the layers in :mod:`pyg_lie.nn`
(:class:`~pyg_lie.nn.LieAlgebraAttention`, :class:`~pyg_lie.nn.VectorTokenAttention`), the
losses and metrics in :mod:`pyg_lie.models.lie_algebra_losses`; all of them stay importable
from this module.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import scatter, softmax

from .._batch import num_graphs as count_graphs
from .. import _checks, _tracing
from .._checks import positive_int
from ..groups import LieGroup, get_group
from ..groups.base import CHART_MODES
from ..neighbors import (AUTO_EMBEDDING_MIN, AUTO_EMBEDDING_MIN_OTHER, GRAPH_METHODS, complete_graph,  # noqa: F401
                         log_knn_graph, log_radius_graph)
from ..neighbors import _sorted_batch
from ..nn.lie_algebra_attention import LieAlgebraAttention, chart_safe_log, relative_log
from ..nn.vector_token_attention import VectorTokenAttention
from .lie_algebra_losses import completion_loss, equivariance_error, pose_error  # noqa: F401

__all__ = ["LieAlgebraTransformer", "VectorTokenTransformer", "VectorTokenAttention",
           "LieAlgebraOutput", "complete_graph", "log_knn_graph", "log_radius_graph", "GRAPH_METHODS",
           "pose_error", "equivariance_error", "completion_loss", "build_model"]


# ----------------------------------------------------------------- outputs
#: the pair head's selection logits lie in ``(-b, b)``: weight ratios up to ``e^(2b)``
PAIR_LOGIT_BOUND = 8.0


class LieAlgebraOutput(NamedTuple):
    """Model outputs.

    Attributes:
        g: ``(N, m, m)`` per-token outputs ``p_i = g_i exp(delta_i)``.
        delta: ``(N, dim)`` algebra corrections.
        prediction: ``(B, m, m)`` completion (equivariant pooled estimate).
        weight: ``(N,)`` pooling weights ``a_i`` (sum to 1 per sequence).
        h: ``(N, hidden)`` final hidden states.
        pair_weight: ``(E,)`` selection weights of the pair head over ``pair_index``
            (pair heads only: ``"pair"``, ``"midpoint"``; sum to 1 per sequence; 0 on
            self loops and on pairs outside the chart).
        pair_g: ``(E, m, m)`` pair proposals ``g_i exp(c_ij w_ij)`` (pair heads only).
        pair_index: ``(2, E)`` pairs ``j -> i`` of the pair head: the model's edges
            (pair heads only).
    """
    g: Tensor
    delta: Tensor
    prediction: Tensor
    weight: Tensor
    h: Tensor
    pair_weight: Optional[Tensor] = None
    pair_g: Optional[Tensor] = None
    pair_index: Optional[Tensor] = None


class _TokenTransformer(nn.Module):
    """Shared trunk and heads; subclasses define the tokens and the attention."""

    def __init__(self, group, hidden_channels: int, num_layers: int, heads: int,
                 in_channels: int, dropout: float, chart: str, k: Optional[int],
                 head: str = "token") -> None:
        super().__init__()
        if head not in ("token", "pair", "midpoint"):
            raise ValueError(f"head must be 'token', 'pair' or 'midpoint', got {head!r}")
        self.head = head
        self.group = get_group(group)
        for name, v in (("hidden_channels", hidden_channels), ("num_layers", num_layers), ("heads", heads)):
            _checks.size(name, v)
        if hidden_channels % heads:
            raise ValueError(f"hidden_channels ({hidden_channels}) must be divisible by heads ({heads})")
        in_channels = _checks.size("in_channels (0: no node feature)", in_channels, low=0)
        if k is not None:
            try:
                k = positive_int("k", k)
            except ValueError:
                raise ValueError(f"k must be None (complete graph) or a positive int, got {k!r}") from None
        dropout = _checks.probability("dropout", dropout)
        if chart not in CHART_MODES:
            raise ValueError(f"chart must be one of {CHART_MODES}, got {chart!r}")
        self.hidden_channels, self.num_layers, self.heads = hidden_channels, num_layers, heads
        self.in_channels, self.dropout, self.chart, self.k = in_channels, dropout, chart, k
        H = hidden_channels
        self.token = nn.Parameter(torch.empty(H))
        self.lin_x = nn.Linear(in_channels, H) if in_channels else None
        self.attn = nn.ModuleList()
        self.lin_out = nn.ModuleList([nn.Linear(H, H) for _ in range(num_layers)])
        self.norm1 = nn.ModuleList([nn.LayerNorm(H) for _ in range(num_layers)])
        self.norm2 = nn.ModuleList([nn.LayerNorm(H) for _ in range(num_layers)])
        self.ffn = nn.ModuleList([nn.Sequential(nn.Linear(H, 2 * H), nn.GELU(), nn.Linear(2 * H, H))
                                  for _ in range(num_layers)])
        self.head_delta = nn.Linear(H, self.group.dim)
        self.head_weight = nn.Linear(H, 1)
        # relative head: delta_i += sum_j gamma(h_i, h_j) w_ij (only with relative logs)
        self.head_edge = (nn.Sequential(nn.Linear(2 * H, H), nn.GELU(), nn.Linear(H, 1))
                          if self._uses_relative_logs else None)
        # pair head: per pair j -> i a selection logit and an interpolation offset from
        # [h_i ; h_j ; vee(w_ij)] (w_ij is invariant, as in the value pathway)
        self.head_pair = (nn.Sequential(nn.Linear(2 * H + self.group.dim, H), nn.GELU(), nn.Linear(H, 2))
                          if head in ("pair", "midpoint") else None)
        #: bound ``b`` of the pair selection logits, ``b tanh(s / b)`` (a plain float, not
        #: state: training may anneal it, see ``pyg-lie train lie-sequence --pair-logit-bound``)
        self.pair_logit_bound = PAIR_LOGIT_BOUND

    _uses_relative_logs = True

    def reset_parameters(self) -> None:
        # zero start: the first layer then sees pure geometry (w_ij) instead of a large
        # constant offset, which otherwise keeps training on a linear plateau for long
        nn.init.zeros_(self.token)
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()
        # start every proposal at its own token and the pooling uniform
        nn.init.zeros_(self.head_delta.weight); nn.init.zeros_(self.head_delta.bias)
        nn.init.zeros_(self.head_weight.weight); nn.init.zeros_(self.head_weight.bias)
        if self.head_edge is not None:
            nn.init.zeros_(self.head_edge[-1].weight); nn.init.zeros_(self.head_edge[-1].bias)
        if self.head_pair is not None:  # uniform selection, every pair proposes its midpoint
            nn.init.zeros_(self.head_pair[-1].weight); nn.init.zeros_(self.head_pair[-1].bias)

    # subclass hooks
    def _initial(self, g: Tensor) -> Tensor:
        return self.token.expand(g.shape[0], -1)

    def _token_features(self, g: Tensor, x: Tensor) -> Tensor:
        """The node features the trunk sees (``x`` itself unless the model has ``irreps_in``)."""
        return x

    def _edge_inputs(self, g, edge_index):
        return None, None

    def _attend(self, layer, h, edge_index, g, w, valid) -> Tensor:
        raise NotImplementedError

    def forward(self, g: Tensor, edge_index: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                x: Optional[Tensor] = None, num_graphs: Optional[int] = None) -> LieAlgebraOutput:
        r"""Args:
            g: ``(N, m, m)`` tokens.
            edge_index: ``(2, E)``; default: complete graph within each sequence
                (or the log-norm kNN graph when the model was built with ``k``).
            batch: ``(N,)`` sorted sequence index (default: one sequence).
            x: optional invariant node features ``(N, in_channels)``.
            num_graphs: number of sequences ``B`` (default ``batch.max() + 1``); pass it,
                ``edge_index`` and ``batch`` to compile the model without graph breaks.
        """
        self.group._check_mat(g, "g")
        if g.dim() != 3:
            raise ValueError(f"g must have shape (N, m, m), got {tuple(g.shape)}")
        N = g.shape[0]
        if batch is None:
            batch = torch.zeros(N, dtype=torch.long, device=g.device)
        batch = _sorted_batch(batch, N)
        if num_graphs is not None:  # the number of pooled predictions: every id of batch below it
            num_graphs = _checks.nonnegative_int("num_graphs", num_graphs)
            _checks.batch_vector(batch, N, num_graphs=num_graphs)
        B = num_graphs if num_graphs is not None else count_graphs(batch)
        if edge_index is None:
            edge_index = (complete_graph(batch) if self.k is None
                          else log_knn_graph(self.group, g, self.k, batch, chart=self.chart))
        dtype = self.token.dtype
        h = self._initial(g)
        if self.lin_x is not None:
            if x is None or x.shape != (N, self.in_channels):
                raise ValueError(f"x must have shape (N, {self.in_channels}) = ({N}, {self.in_channels}) "
                                 f"because the model was built with in_channels={self.in_channels}")
            h = h + self.lin_x(self._token_features(g, x).to(dtype))
        elif x is not None:
            raise ValueError("x was given but the model was built with in_channels=0; pass in_channels")
        w, valid = self._edge_inputs(g, edge_index)  # once per forward, shared by all layers
        for layer in range(self.num_layers):
            a = self._attend(layer, h, edge_index, g, w, valid)
            h = self.norm1[layer](h + F.dropout(self.lin_out[layer](a), self.dropout, self.training))
            h = self.norm2[layer](h + F.dropout(self.ffn[layer](h), self.dropout, self.training))
        delta = self.head_delta(h)
        wd = None
        if w is not None:
            wd = w.to(dtype) if valid is None else torch.where(valid[:, None], w.to(dtype), 0.0)
        if self.head_edge is not None:
            gamma = self._pair_mlp(self.head_edge, h, edge_index)  # (E, 1)
            delta = delta + scatter(gamma * wd, edge_index[1], dim=0, dim_size=N, reduce="sum")
        gd = g.to(dtype)
        p = self.group.compose(gd, self.group.exp(delta))
        weight = softmax(self.head_weight(h).squeeze(-1), batch, num_nodes=B, dim=0)
        if self.head_pair is None:
            return LieAlgebraOutput(p, delta, self._pool(p, weight, batch, B), weight, h)
        if not _tracing.tracing() and N and bool((torch.bincount(batch) < 2).any()):
            raise ValueError(f"head={self.head!r} needs at least 2 tokens in every sequence (a pair "
                             f"to interpolate); use head='token' for shorter sequences")
        # pair head: pair j -> i proposes g_i exp(c_ij w_ij) (c = 1/2: the geodesic midpoint).
        # Pairs are the model's edges; self loops (and out-of-chart pairs) get weight 0, which
        # keeps shapes static (no boolean indexing) for torch.compile.
        pairs = edge_index
        if wd is None:  # vector tokens (A) have no relative logs of their own
            wp, vp = relative_log(self.group, g, pairs, self.chart)
            wp = wp.to(dtype) if vp is None else torch.where(vp[:, None], wp.to(dtype), 0.0)
        else:  # the trunk's logs
            wp, vp = wd, valid
        proposes = pairs[0] != pairs[1]
        if vp is not None:  # out-of-chart pairs cannot propose
            proposes = proposes & vp
        out = self._pair_mlp(self.head_pair, h, pairs, wp)  # (E, 2)
        # bounded logits: a saturated softmax would freeze the selection (zero gradient)
        b = self.pair_logit_bound
        logit = b * torch.tanh(out[:, 0] / b)
        c = 0.5 + out[:, 1:] if self.head == "pair" else torch.full_like(out[:, 1:], 0.5)
        logit = torch.where(proposes, logit, torch.full_like(logit, -1e30))
        pb = batch[pairs[1]]
        pair_weight = softmax(logit, pb, num_nodes=B, dim=0)
        pair_g = self.group.compose(gd[pairs[1]], self.group.exp(c * wp))
        prediction = self._pool(pair_g, pair_weight, pb, num_segments=B)
        return LieAlgebraOutput(p, delta, prediction, weight, h, pair_weight, pair_g, pairs)

    def _pair_mlp(self, mlp: nn.Sequential, h: Tensor, edge_index: Tensor,
                  edge_attr: Optional[Tensor] = None) -> Tensor:
        """``MLP([h_i ; h_j (; edge_attr_ij)])`` per edge ``j -> i``; the first linear map is
        split into node-level parts so the edge work is one gather and an add."""
        lin1, lin2 = mlp[0], mlp[2]
        Hc = self.hidden_channels
        zi = F.linear(h, lin1.weight[:, :Hc], lin1.bias)
        zj = F.linear(h, lin1.weight[:, Hc:2 * Hc])
        z = zi[edge_index[1]] + zj[edge_index[0]]
        if edge_attr is not None:
            z = z + F.linear(edge_attr, lin1.weight[:, 2 * Hc:])
        return lin2(F.gelu(z))

    def _pool(self, p: Tensor, weight: Tensor, batch: Tensor, num_segments: int) -> Tensor:
        """One-step weighted Frechet mean of proposals ``p (N, m, m)`` per segment of ``batch``
        (``num_segments`` segments). A segment without tokens (a graph id that ``batch``
        skips, or ``num_segments`` beyond its last id) predicts the group's identity, and one
        whose weights are all zero (every proposal outside the chart) its anchor proposal."""
        N, B = p.shape[0], num_segments
        if N == 0:
            return self.group.identity(B, dtype=p.dtype, device=p.device)
        wmax = scatter(weight, batch, dim=0, dim_size=B, reduce="max")
        idx = torch.arange(N, device=p.device)
        cand = torch.where(weight == wmax[batch], idx, torch.full_like(idx, N))
        anchor = scatter(cand, batch, dim=0, dim_size=B, reduce="min")  # (B,) first max
        pa = p[anchor]  # (B, m, m)
        r, valid = chart_safe_log(self.group, self.group.between(pa[batch], p), "mask",
                                  what="proposal relative to its anchor")
        a = weight if valid is None else weight * valid.to(weight.dtype)
        num = scatter(a[:, None] * r, batch, dim=0, dim_size=B, reduce="sum")
        den = scatter(a, batch, dim=0, dim_size=B, reduce="sum")
        mean = num / den.clamp_min(torch.finfo(den.dtype).tiny)[:, None]  # num = 0 where den = 0: the anchor
        out = self.group.compose(pa, self.group.exp(mean))
        tokens = scatter(torch.ones_like(weight), batch, dim=0, dim_size=B, reduce="sum")
        eye = torch.eye(out.shape[-1], dtype=out.dtype, device=out.device)
        return torch.where((tokens == 0)[:, None, None], eye, out)

    def num_score_parameters(self) -> int:
        """Parameters of the attention scores only (the paper's "score params")."""
        raise NotImplementedError

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class LieAlgebraTransformer(_TokenTransformer):
    r"""Transformer over group-element tokens (models G and C of the paper).

    Args:
        group: group name (``"SO2"``, ``"SE2"``, ``"SO3"``, ``"SE3"``, ``"Aff2"``,
            ``"Aff3"``) or a :class:`~pyg_lie.groups.LieGroup`.
        hidden_channels: width of ``h`` (divisible by ``heads``).
        num_layers: number of attention blocks.
        heads: attention heads per layer.
        score: ``"closed_form"`` (G) or ``"mlp"`` (C).
        in_channels: size of an optional invariant node feature ``x`` (0: none).
        kernel_dim: hidden width of the ``mlp`` score.
        dropout: dropout in attention and residual branches.
        chart: ``"mask"`` or ``"error"`` for out-of-chart relative poses.
        k: ``None`` for the complete graph per sequence, or the number of nearest
            neighbours in the log-norm metric (linear attention cost).
        head: completion head, ``"token"`` (every token proposes ``g_i exp(delta_i)``),
            ``"pair"`` (every pair proposes a point on the geodesic between them,
            ``g_i exp(c_ij w_ij)``, ``c_ij = 1/2 + MLP``) or ``"midpoint"`` (``c_ij = 1/2``);
            see the module docstring.
        irreps_in: e3nn ``Irreps`` (or string) of a payload ``x`` in the global frame
            (groups SO3, SE3): token ``i`` sees it in its own frame,
            ``D(R_i)^{-1} x_i`` with ``R_i`` the rotation part of ``g_i``, which is
            invariant, so the model stays equivariant under ``g -> b g``,
            ``x -> D(R_b) x``. ``in_channels`` defaults to its dimension (and must
            equal it if given).

    ``forward(g, edge_index=None, batch=None, x=None)`` returns a
    :class:`LieAlgebraOutput`.
    """

    def __init__(self, group: Union[str, LieGroup], hidden_channels: int = 32, num_layers: int = 3,
                 heads: int = 4, score: str = "closed_form", in_channels: int = 0,
                 kernel_dim: int = 32, dropout: float = 0.0, chart: str = "mask",
                 k: Optional[int] = None, head: str = "token", *, irreps_in=None) -> None:
        if irreps_in is not None:
            from ..interop.e3nn import as_irreps, check_rotation_group
            check_rotation_group(get_group(group), "irreps_in")
            irreps = as_irreps(irreps_in, "irreps_in")
            if irreps.dim == 0:
                raise ValueError(f"irreps_in must have dimension >= 1, got '{irreps}'")
            if in_channels not in (0, irreps.dim):
                raise ValueError(f"in_channels ({in_channels!r}) must equal the dimension of irreps_in "
                                 f"'{irreps}' ({irreps.dim}); omit in_channels")
            in_channels = irreps.dim
        super().__init__(group, hidden_channels, num_layers, heads, in_channels, dropout, chart, k, head)
        self.irreps_in = None if irreps_in is None else irreps
        self.score = score
        for _ in range(num_layers):
            self.attn.append(LieAlgebraAttention(hidden_channels, hidden_channels, self.group,
                                                 heads=heads, score=score, kernel_dim=kernel_dim,
                                                 dropout=dropout, chart=chart))
        self.reset_parameters()

    def _edge_inputs(self, g, edge_index):
        return relative_log(self.group, g, edge_index, self.chart)

    def _token_features(self, g: Tensor, x: Tensor) -> Tensor:
        if self.irreps_in is None:
            return x
        from ..interop.e3nn import _rotate
        return _rotate(self.irreps_in, x, g[..., :3, :3], inverse=True)

    def _attend(self, layer, h, edge_index, g, w, valid):
        return self.attn[layer](h, edge_index, g, rel_log=w, valid=valid)

    def num_score_parameters(self) -> int:
        return sum(a.num_score_parameters() for a in self.attn)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(group={self.group.name}, hidden={self.hidden_channels}, "
                f"layers={self.num_layers}, heads={self.heads}, score={self.score})")


class VectorTokenTransformer(_TokenTransformer):
    r"""Baseline A: tokens are the flattened matrices ``vec(g_i)`` embedded linearly.

    Same trunk and completion head as :class:`LieAlgebraTransformer`, but
    ``h^0_i = t + W_g vec(g_i)`` and scaled dot-product attention (no ``w_ij``),
    so the features depend on absolute poses and the model is not equivariant.
    ``k`` builds the same log-norm kNN graph (for timing comparisons). Vector
    tokens have no ``w_ij``, so the per-token correction is ``delta_i = W_delta h_i``.
    """

    _uses_relative_logs = False

    def __init__(self, group: Union[str, LieGroup], hidden_channels: int = 32, num_layers: int = 3,
                 heads: int = 4, in_channels: int = 0, dropout: float = 0.0, chart: str = "mask",
                 k: Optional[int] = None, head: str = "token") -> None:
        super().__init__(group, hidden_channels, num_layers, heads, in_channels, dropout, chart, k, head)
        self.score = "vector"
        m = self.group.matrix_size
        self.lin_g = nn.Linear(m * m, hidden_channels)
        for _ in range(num_layers):
            self.attn.append(VectorTokenAttention(hidden_channels, hidden_channels, heads, dropout))
        self.reset_parameters()

    def _initial(self, g: Tensor) -> Tensor:
        return self.token + self.lin_g(g.flatten(1).to(self.token.dtype))

    def _attend(self, layer, h, edge_index, g, w, valid):
        return self.attn[layer](h, edge_index)

    def num_score_parameters(self) -> int:
        return sum(a.num_score_parameters() for a in self.attn)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(group={self.group.name}, hidden={self.hidden_channels}, "
                f"layers={self.num_layers}, heads={self.heads})")


def build_model(group: Union[str, LieGroup], score: str, **kwargs) -> _TokenTransformer:
    """``score`` in ``{"closed_form", "mlp", "vector"}`` -> the paper's G, C or A."""
    if score == "vector":
        kwargs.pop("kernel_dim", None)
        return VectorTokenTransformer(group, **kwargs)
    if score in ("closed_form", "mlp"):
        return LieAlgebraTransformer(group, score=score, **kwargs)
    raise ValueError(f"score must be 'closed_form', 'mlp' or 'vector', got {score!r}")
