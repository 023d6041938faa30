r"""Quadrature-weighted neighbourhood attention on point sets on the sphere S^2.

:class:`S2AttentionConv` is the graph-level form of the neighbourhood attention
of torch-harmonics (``NeighborhoodAttentionS2``, Bonev et al. 2025): for a target
point :math:`y_i` with neighbourhood :math:`N(i)` (source points within a
geodesic radius, see :mod:`pyg_lie.neighbors`) and source quadrature weights
:math:`w_j > 0` (the area each source point represents),

.. math::
    o_i = W_o \, \Big\Vert_{h=1}^{H} \sum_{j \in N(i)}
        \frac{w_j \exp(\langle q^h_i, k^h_j \rangle)}
             {\sum_{l \in N(i)} w_l \exp(\langle q^h_i, k^h_l \rangle)} \, v^h_j + b_o ,

with :math:`q_i = s\,\mathrm{norm}(W_q x_i + b_q)`, :math:`k_j = \mathrm{norm}(W_k x_j + b_k)`,
:math:`v_j = W_v x_j + b_v`, heads being contiguous channel blocks, ``norm`` an
optional per-head RMS norm with weight ``1 + g`` (qk-norm) and ``s`` the scale
(default ``1/sqrt(k_channels / heads)``). Equivalently the softmax runs over the
scores ``<q_i, k_j> + log w_j``: the log quadrature weight of each source is an
additive score bias. This makes the sum a quadrature rule for a continuous
attention integral over the geodesic disk, so the layer is (up to quadrature
error) independent of the sampling and rotation equivariant: rotating the points
together with their weights leaves every per-point output unchanged.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from .. import _checks as checks
from ._bipartite import node_pair
from ._explain import check_explain_mode, explain_mask, masked_edge_attention
from .attention_core import edge_attention
from ._s2_kernels import BipartiteCSR, neighborhood_attention

__all__ = ["S2AttentionConv"]

PairTensor = Tuple[Tensor, Tensor]


class S2AttentionConv(MessagePassing):
    r"""Multi-head S^2 neighbourhood attention with quadrature weights (PyG layer).

    Args:
        in_channels: input feature size ``C_in`` of source and target nodes.
        out_channels: output size ``C_out`` (value and output-projection width);
            defaults to ``in_channels``.
        heads: number of heads ``H``; must divide ``k_channels`` and ``out_channels``.
        k_channels: query/key width ``C_k``; defaults to ``in_channels``.
        scale: score scale ``s`` (float or tensor); default ``1/sqrt(C_k / H)``.
        use_qknorm: per-head RMS norm of queries and keys (weights ``1 + g``,
            ``g`` initialised to zero), as in torch-harmonics.
        bias: add biases to the four projections.
        warn_isolated: warn (eagerly, outside ``torch.compile``) when some target
            has no neighbour. Such targets get zeros before the output projection
            (torch-harmonics returns NaN there).
        fused: ``True`` (default) runs the attention on the library's CSR attention
            engine (:func:`~pyg_lie.nn.attention_core.csr_softmax_attention`: fused
            scores, softmax and aggregation, the log quadrature weights as location
            scores); ``False`` runs PyG message passing (``propagate``, per-edge messages,
            scatter softmax), the reference. Same numbers up to rounding. Under PyG's
            explainer the layer always takes the message-passing path.
        explain_mode: where PyG's explainer edge mask acts: ``"score"`` (default; a log-bias on
            the scores beside ``log w_j``, so a 0/1 mask equals removing the edges) or
            ``"message"`` (the messages after the softmax, PyG's default; every edge, a
            target's lone incoming one included, gets a gradient); see
            :mod:`pyg_lie.nn._explain`.

    Parameters (named and initialised like torch-harmonics, 2-D here):
        ``q_weights``, ``k_weights`` ``(C_k, C_in)``, ``v_weights`` ``(C_out, C_in)``,
        ``proj_weights`` ``(C_out, C_out)``, biases ``q_bias``, ``k_bias`` ``(C_k,)``,
        ``v_bias``, ``proj_bias`` ``(C_out,)``, and with qk-norm ``q_norm_weights``,
        ``k_norm_weights`` ``(C_k / H,)``.

    Shapes:
        - **input:** node features ``x`` of shape ``(N, C_in)`` or ``(N, B, C_in)``
          (``B`` feature copies sharing one graph, e.g. a batch of signals on a
          fixed grid), or a bipartite pair ``(x_src, x_dst)``; ``edge_index``
          ``(2, E)`` with row 0 the sources ``j`` and row 1 the targets ``i``;
          ``quad_weights`` ``(N_src,)`` positive quadrature weights of the
          sources (``None``: uniform, no bias), or a pair ``(w_src, w_dst)`` beside
          a pair ``x`` (as :func:`~torch_geometric.nn.to_hetero` passes a node-level
          input; only the sources' weights enter, ``w_dst`` may be ``None``).
        - **output:** ``(N_dst, C_out)`` or ``(N_dst, B, C_out)``; with
          ``return_attention_weights=True`` also ``(edge_index, alpha)`` with
          ``alpha`` of shape ``(E, H)`` or ``(E, B, H)``.

    Example:
        >>> import torch
        >>> from pyg_lie.nn import S2AttentionConv
        >>> _ = torch.manual_seed(0)
        >>> layer = S2AttentionConv(8, 16, heads=2)
        >>> x = torch.randn(5, 8)                # features of 5 points on the sphere
        >>> w = torch.full((5,), 4 * torch.pi / 5)  # the area each point represents
        >>> edge_index = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 0]])
        >>> layer(x, edge_index, quad_weights=w).shape
        torch.Size([5, 16])
        >>> x_coarse = torch.randn(2, 8)         # bipartite: 5 sources, 2 targets
        >>> layer((x, x_coarse), torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]]), quad_weights=w).shape
        torch.Size([2, 16])
    """

    # trailing singleton dims of the projection weights (torch-harmonics grids use (1, 1))
    _weight_suffix: Tuple[int, ...] = ()

    def __init__(
        self,
        in_channels: int,
        out_channels: Optional[int] = None,
        heads: int = 1,
        k_channels: Optional[int] = None,
        scale: Optional[Union[float, Tensor]] = None,
        use_qknorm: bool = False,
        bias: bool = True,
        warn_isolated: bool = True,
        fused: bool = True,
        *,
        explain_mode: str = "score",
    ) -> None:
        super().__init__(aggr="sum", node_dim=0)
        self.in_channels = checks.size("in_channels", in_channels)
        self.heads = checks.size("heads (num_heads)", heads)
        self.k_channels = self.in_channels if k_channels is None else checks.size("k_channels", k_channels)
        self.out_channels = self.in_channels if out_channels is None else checks.size("out_channels", out_channels)
        if isinstance(scale, Tensor):
            if not scale.is_floating_point() or not bool(torch.isfinite(scale).all()):
                raise ValueError(f"scale must be a finite number or a finite floating-point tensor, got {scale!r}")
        elif scale is not None:
            scale = checks.finite_float("scale", scale, " (or None for 1 / sqrt(k_channels / heads))")
        if self.k_channels % self.heads != 0:
            raise ValueError(f"k_channels ({self.k_channels}) must be divisible by the number of heads "
                             f"({self.heads}); choose k_channels as a multiple of heads")
        if self.out_channels % self.heads != 0:
            raise ValueError(f"out_channels ({self.out_channels}) must be divisible by the number of heads "
                             f"({self.heads}); choose out_channels as a multiple of heads")
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.k_channels // self.heads)
        self.use_qknorm = bool(use_qknorm)
        self.warn_isolated = bool(warn_isolated)
        self.fused = bool(fused)
        self.explain_mode = check_explain_mode(explain_mode)
        sfx = self._weight_suffix
        self.q_weights = nn.Parameter(torch.empty(self.k_channels, self.in_channels, *sfx))
        self.k_weights = nn.Parameter(torch.empty(self.k_channels, self.in_channels, *sfx))
        self.v_weights = nn.Parameter(torch.empty(self.out_channels, self.in_channels, *sfx))
        self.proj_weights = nn.Parameter(torch.empty(self.out_channels, self.out_channels, *sfx))
        if bias:
            self.q_bias = nn.Parameter(torch.empty(self.k_channels))
            self.k_bias = nn.Parameter(torch.empty(self.k_channels))
            self.v_bias = nn.Parameter(torch.empty(self.out_channels))
            self.proj_bias = nn.Parameter(torch.empty(self.out_channels))
        else:
            self.register_parameter("q_bias", None)
            self.register_parameter("k_bias", None)
            self.register_parameter("v_bias", None)
            self.register_parameter("proj_bias", None)
        if use_qknorm:
            self.q_norm_weights = nn.Parameter(torch.empty(self.k_channels // self.heads))
            self.k_norm_weights = nn.Parameter(torch.empty(self.k_channels // self.heads))
        else:
            self.register_parameter("q_norm_weights", None)
            self.register_parameter("k_norm_weights", None)
        self._alpha: Optional[Tensor] = None
        self.reset_parameters()

    # ------------------------------------------------------------------ parameters
    def reset_parameters(self) -> None:
        """Xavier-uniform-style initialisation with the bounds torch-harmonics uses."""
        super().reset_parameters()
        b_qk = math.sqrt(6.0 / (self.in_channels + self.k_channels))
        b_v = math.sqrt(6.0 / (self.in_channels + self.out_channels))
        b_p = math.sqrt(3.0 / self.out_channels)
        with torch.no_grad():
            self.q_weights.uniform_(-b_qk, b_qk)
            self.k_weights.uniform_(-b_qk, b_qk)
            self.v_weights.uniform_(-b_v, b_v)
            self.proj_weights.uniform_(-b_p, b_p)
            for p in (self.q_bias, self.k_bias, self.v_bias, self.proj_bias,
                      self.q_norm_weights, self.k_norm_weights):
                if p is not None:
                    p.zero_()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads}, "
                f"k_channels={self.k_channels}, use_qknorm={self.use_qknorm})")

    # ------------------------------------------------------------------ pieces
    def project_qkv(self, x_q: Tensor, x_k: Tensor, x_v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Node-wise projections, head split, qk-norm and scale.

        Args:
            x_q: ``(N_dst, *, C_in)``; x_k, x_v: ``(N_src, *, C_in)``.

        Returns:
            ``q (N_dst, *, H, C_k/H)`` (scaled), ``k (N_src, *, H, C_k/H)``, ``v (N_src, *, H, C_out/H)``.
        """
        H = self.heads
        q = F.linear(x_q, self.q_weights.flatten(1), self.q_bias)
        k = F.linear(x_k, self.k_weights.flatten(1), self.k_bias)
        v = F.linear(x_v, self.v_weights.flatten(1), self.v_bias)
        q = q.unflatten(-1, (H, -1))
        k = k.unflatten(-1, (H, -1))
        v = v.unflatten(-1, (H, -1))
        if self.q_norm_weights is not None:
            q = F.rms_norm(q, normalized_shape=self.q_norm_weights.shape, weight=1 + self.q_norm_weights)
        if self.k_norm_weights is not None:
            k = F.rms_norm(k, normalized_shape=self.k_norm_weights.shape, weight=1 + self.k_norm_weights)
        return q * self.scale, k, v

    def output_projection(self, h: Tensor) -> Tensor:
        """``(N, *, H, C_out/H)`` head outputs to ``(N, *, C_out)``."""
        return F.linear(h.flatten(-2), self.proj_weights.flatten(1), self.proj_bias)

    @staticmethod
    def log_quad_weights(quad_weights: Optional[Tensor], dtype: torch.dtype) -> Optional[Tensor]:
        """``log w`` clamped away from ``-inf`` (zero weights would give NaN for all-zero neighbourhoods)."""
        if quad_weights is None:
            return None
        w = quad_weights.to(dtype)
        return torch.log(w.clamp_min(torch.finfo(dtype).tiny))

    @staticmethod
    def build_plan(edge_index: Tensor, num_src: int, num_dst: int) -> BipartiteCSR:
        """Precompute the CSR structure of a fixed graph (target-sorted edges, row pointer and
        the transposed pattern gradients need), for ``forward(plan=...)``: a graph used many
        times is then sorted once.

        ``edge_index`` is any integer ``(2, E)`` tensor (PyG's ``EdgeIndex`` included) with
        sources in ``[0, num_src)`` and targets in ``[0, num_dst)``; ``ValueError`` otherwise."""
        return BipartiteCSR.from_edge_index(edge_index, num_src, num_dst, transpose=True)

    def _check_isolated(self, edge_index: Tensor, num_dst: int, plan: Optional[BipartiteCSR]) -> None:
        if not self.warn_isolated or checks.tracing():
            return
        if plan is not None:
            n_iso = plan.num_isolated
        else:
            deg = torch.bincount(edge_index[1], minlength=num_dst)
            n_iso = int((deg == 0).sum())
        if n_iso > 0:
            warnings.warn(f"{self.__class__.__name__}: {n_iso} of {num_dst} target points have no neighbour "
                          f"within the cutoff; their attention output is zero before the output projection "
                          f"(increase theta_cutoff to avoid this)", RuntimeWarning, stacklevel=3)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, edge_index: Tensor, log_w: Optional[Tensor],
               plan: Optional[BipartiteCSR] = None, need_weights: bool = False
               ) -> Tuple[Tensor, Optional[Tensor]]:
        """Attention core on projected tensors (see :meth:`project_qkv`); returns ``(N_dst, *, H, Dv)``.
        Under PyG's explainer the layer takes the message-passing path, where the edge mask acts
        on the scores or on the messages (:attr:`explain_mode`, :mod:`pyg_lie.nn._explain`)."""
        num_dst, num_src = q.shape[0], k.shape[0]
        mask = explain_mask(self, edge_index.shape[1])
        if self.fused and mask is None:
            if plan is None:
                plan = BipartiteCSR.from_edge_index(edge_index, num_src, num_dst)
            elif not checks.tracing() and (plan.num_src, plan.num_dst, plan.num_edges) != \
                    (num_src, num_dst, edge_index.shape[1]):
                raise ValueError(f"plan was built for {plan.num_src} sources, {plan.num_dst} targets and "
                                 f"{plan.num_edges} edges, but the input has {num_src}, {num_dst} and "
                                 f"{edge_index.shape[1]}; pass plan=S2AttentionConv.build_plan(edge_index, "
                                 f"num_src, num_dst) of these edges")
            self._check_isolated(edge_index, num_dst, plan)
            return neighborhood_attention(q, k, v, log_w, plan, need_weights=need_weights)
        self._check_isolated(edge_index, num_dst, None)
        # the message-mode mask is applied in message() rather than by PyG's explain_message:
        # a subclass instantiated after this class inherits its generated propagate, which PyG
        # then also takes for the explainer's, and that one never calls explain_message
        message_mask = None
        if mask is not None and check_explain_mode(self.explain_mode) == "message":
            mask, message_mask = None, mask
        out = self.propagate(edge_index, q=q, k=k, v=v, log_w=log_w, edge_mask=mask, message_mask=message_mask,
                             size=(k.shape[0], num_dst))
        alpha = self._alpha
        self._alpha = None
        return out, alpha

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        x: Union[Tensor, PairTensor],
        edge_index: Tensor,
        quad_weights: Optional[Union[Tensor, Tuple[Optional[Tensor], Optional[Tensor]]]] = None,
        value: Optional[Tensor] = None,
        plan: Optional[BipartiteCSR] = None,
        return_attention_weights: Optional[bool] = None,
    ):
        """Args:
            x: ``(N, [B,] C_in)`` or ``(x_src, x_dst)``; keys come from ``x_src``, queries from ``x_dst``.
            edge_index: ``(2, E)`` ``[source; target]``, e.g. from
                :func:`pyg_lie.neighbors.geodesic_radius` (any edge order).
            quad_weights: ``(N_src,)`` positive source quadrature weights; ``log w_j`` is added
                to every score ``<q_i, k_j>`` of an edge ``j -> i``. With a pair ``x``, also a
                pair ``(w_src, w_dst)`` (PyG's bipartite form, what ``to_hetero`` passes):
                ``w_src`` is used, ``w_dst`` (``None`` or ``(N_dst,)``) is not read.
            value: optional separate value features ``(N_src, [B,] C_in)`` (default ``x_src``).
            plan: optional :meth:`build_plan` of this ``edge_index``: the graph's CSR structure,
                built once for a graph used many times (e.g. a grid) instead of in every call.
            return_attention_weights: also return ``(edge_index, alpha)``.
        """
        x_src, x_dst, bipartite = node_pair("x", x)
        if isinstance(quad_weights, (tuple, list)):
            if not bipartite:
                raise ValueError("quad_weights may be a pair (w_src, w_dst) only when x is a pair (x_src, x_dst); "
                                 "with one x pass the (N,) weights")
            w_src, w_dst, _ = node_pair("quad_weights", quad_weights)
            if w_dst is not None and (not isinstance(w_dst, Tensor) or w_dst.shape != (x_dst.shape[0],)):
                got = tuple(w_dst.shape) if isinstance(w_dst, Tensor) else type(w_dst).__name__
                raise ValueError(f"quad_weights[1] (w_dst) must be None or have shape (N_dst,) = "
                                 f"({x_dst.shape[0]},), got {got}")
            quad_weights = w_src
        if quad_weights is not None and not isinstance(quad_weights, Tensor):
            raise ValueError(f"quad_weights must be a tensor of shape (N_src,) or None, got "
                             f"{type(quad_weights).__name__}")
        for name, t in (("x_src", x_src), ("x_dst", x_dst), ("value", value)):
            if t is None:
                continue
            if t.dim() not in (2, 3) or t.shape[-1] != self.in_channels:
                raise ValueError(f"{name} must have shape (N, {self.in_channels}) or (N, B, {self.in_channels}), "
                                 f"got {tuple(t.shape)}")
        x_val = x_src if value is None else value
        if x_dst.dim() != x_src.dim() or x_val.shape != x_src.shape:
            raise ValueError(f"source, target and value features must have matching batch layout, got "
                             f"x_src {tuple(x_src.shape)}, x_dst {tuple(x_dst.shape)}, value {tuple(x_val.shape)}")
        given = edge_index
        checks.edge_index(edge_index)
        edge_index = checks.plain_index("edge_index", edge_index)  # EdgeIndex / Index: a plain int64 tensor
        if quad_weights is not None and quad_weights.shape != (x_src.shape[0],):
            raise ValueError(f"quad_weights must have shape (N_src,) = ({x_src.shape[0]},), got "
                             f"{tuple(quad_weights.shape)}")
        if quad_weights is not None and checks._reads_values(quad_weights) and quad_weights.numel() \
                and not bool((quad_weights >= 0).all() & torch.isfinite(quad_weights).all()):
            raise ValueError("quad_weights must be finite and >= 0 (quadrature weights of the source points), got "
                             f"values down to {float(quad_weights.min())}")
        q, k, v = self.project_qkv(x_dst, x_src, x_val)
        log_w = self.log_quad_weights(quad_weights, q.dtype)
        need = bool(return_attention_weights)
        h, alpha = self.attend(q, k, v, edge_index, log_w, plan=plan, need_weights=need)
        out = self.output_projection(h)
        if need:
            return out, (given, alpha)
        return out

    def message(self, q_i: Tensor, k_j: Tensor, v_j: Tensor, log_w: Optional[Tensor], edge_mask: Optional[Tensor],
                message_mask: Optional[Tensor], edge_index_j: Tensor, index: Tensor, ptr: Optional[Tensor],
                size_i: Optional[int]) -> Tensor:
        score = (q_i * k_j).sum(-1)  # (E, *, H)
        if log_w is not None:
            lw = log_w.index_select(0, edge_index_j)
            score = score + lw.view(-1, *([1] * (score.dim() - 1)))
        if edge_mask is None:
            alpha = edge_attention(score, index, num_nodes=size_i, ptr=ptr)
        else:
            alpha = masked_edge_attention(score, index, size_i, edge_mask)
        self._alpha = alpha
        if message_mask is not None:  # explain_mode="message": PyG's masking of the messages
            alpha = alpha * message_mask.to(alpha.dtype).view(-1, *([1] * (alpha.dim() - 1)))
        return alpha.unsqueeze(-1) * v_j

    def explain_message(self, inputs: Tensor, dim_size: Optional[int]) -> Tensor:
        # the explainer's edge mask already acted in message(), on the scores or on the messages
        return inputs
