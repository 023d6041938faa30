r"""Drop-in, graph-based replacement for ``torch_harmonics.NeighborhoodAttentionS2``.

:class:`S2NeighborhoodAttention` takes the constructor arguments of
``torch_harmonics.NeighborhoodAttentionS2`` (0.9.3) and has the same parameter
names and shapes, so ``load_state_dict`` works in both directions. It turns the
``(B, C, nlat, nlon)`` grid signals into node features ``(nlat * nlon, B, C)``,
builds the neighbourhood graph of the two grids once (from
``torch_harmonics.quadrature``: colatitudes, longitudes and quadrature weights)
and runs :class:`~pyg_lie.nn.S2AttentionConv` on it.

Neighbourhoods: source ``j`` (input grid) attends into target ``i`` (output
grid) iff their geodesic distance is ``<= (1 + 1e-3) * theta_cutoff`` (the
widening torch-harmonics applies). The quadrature weight of an input point on
colatitude ring ``t`` is ``2 pi w_t / nlon_in`` with ``w_t`` the latitude weight
of ``precompute_latitudes``.

Differences from torch-harmonics, by design:

* empty neighbourhoods (possible with small user cutoffs) give zeros before the
  output projection and a warning, not NaN;
* the attention runs in the input dtype (float64 stays float64; torch-harmonics
  computes its core in float32);
* wrong input shapes raise ``ValueError`` naming the argument.
"""
from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from typing import Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import _checks as checks
from ._explain import explain_mask
from .s2_attention_conv import S2AttentionConv
from ._s2_graph import geodesic_neighbors
from ._s2_kernels import BipartiteCSR, neighborhood_attention

__all__ = ["S2NeighborhoodAttention", "grid_points", "grid_graph", "THETA_CUTOFF_EPS"]

#: widening factor of the cutoff used by torch-harmonics (``quadrature.THETA_CUTOFF_EPS``)
THETA_CUTOFF_EPS = 1e-3

_GRIDS = ("equiangular", "legendre-gauss", "lobatto", "equiangular-trapezoidal")


def _check_grid(grid: str, name: str) -> None:
    if grid not in _GRIDS:
        raise ValueError(f"{name} must be one of {_GRIDS}, got {grid!r}")


def grid_points(nlat: int, nlon: int, grid: str = "equiangular") -> Tuple[Tensor, Tensor]:
    """Unit vectors and quadrature weights of a torch-harmonics grid (float64).

    Returns:
        ``pos (nlat * nlon, 3)`` (lat-major, matching ``x.flatten(-2)``) and
        ``quad_weights (nlat * nlon,)`` with ``2 pi w_t / nlon`` on ring ``t``
        (they sum to ``4 pi`` up to quadrature error).
    """
    from torch_harmonics.quadrature import precompute_latitudes, precompute_longitudes

    _check_grid(grid, "grid")
    colat, w = precompute_latitudes(nlat, grid=grid)
    lon = precompute_longitudes(nlon)
    colat = colat.to(torch.float64)
    lon = lon.to(torch.float64)
    st, ct = torch.sin(colat)[:, None], torch.cos(colat)[:, None]
    pos = torch.stack([st * torch.cos(lon)[None, :], st * torch.sin(lon)[None, :], ct.expand(nlat, nlon)], -1)
    qw = (2.0 * math.pi * w.to(torch.float64) / nlon)[:, None].expand(nlat, nlon)
    return pos.reshape(-1, 3), qw.reshape(-1).contiguous()


_CACHE: "OrderedDict[tuple, Dict[str, object]]" = OrderedDict()
_CACHE_SIZE = 32


def grid_graph(in_shape: Tuple[int, int], out_shape: Tuple[int, int], grid_in: str, grid_out: str,
               theta_cutoff: float, device: Union[str, torch.device] = "cpu") -> Dict[str, object]:
    """Neighbourhood graph between two grids, cached per (shapes, grids, cutoff, device).

    Returns a dict with ``edge_index`` ``(2, E)`` (input node -> output node, sorted
    by target, each neighbourhood by input ring and longitude offset from the target),
    ``quad_weights`` ``(nlat_in * nlon_in,)`` float64, and ``graph``, the CSR structure of
    the attention engine (:class:`~pyg_lie.nn._s2_kernels.BipartiteCSR`, with the transposed
    pattern that gradients need).
    """
    device = torch.device(device)
    key = (tuple(in_shape), tuple(out_shape), grid_in, grid_out, float(theta_cutoff), str(device))
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    pos_in, qw = grid_points(*in_shape, grid=grid_in)
    pos_out, _ = grid_points(*out_shape, grid=grid_out)
    theta_eff = (1.0 + THETA_CUTOFF_EPS) * float(theta_cutoff)
    edge_index = geodesic_neighbors(pos_in, pos_out, theta_eff)
    # order each neighbourhood by (input ring, longitude offset relative to the target) so that every
    # output longitude sums its neighbours in the same order: longitude shifts then commute bitwise
    (nlat_in, nlon_in), (_, nlon_out) = in_shape, out_shape
    src, dst = edge_index[0], edge_index[1]
    rel = torch.remainder(src % nlon_in - torch.div((dst % nlon_out) * nlon_in, nlon_out, rounding_mode="floor"),
                          nlon_in)
    order_key = (dst * nlat_in + torch.div(src, nlon_in, rounding_mode="floor")) * nlon_in + rel
    edge_index = edge_index[:, torch.argsort(order_key)]
    graph = BipartiteCSR.from_edge_index(edge_index, pos_in.shape[0], pos_out.shape[0], keep_order=True,
                                         transpose=True)
    entry = {"edge_index": edge_index.to(device), "quad_weights": qw.to(device), "graph": graph.to(device)}
    _CACHE[key] = entry
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return entry


class S2NeighborhoodAttention(S2AttentionConv):
    r"""Neighbourhood attention on torch-harmonics grids, interchangeable with
    ``torch_harmonics.NeighborhoodAttentionS2``.

    .. math::
        y(x_i) = W_o \Big\Vert_h \sum_{j:\ d(x_i, x_j) \le \theta_c}
            \frac{w_j e^{\langle q^h_i, k^h_j\rangle}}{\sum_l w_l e^{\langle q^h_i, k^h_l\rangle}} v^h_j + b_o

    Args:
        in_channels: channels ``C_in`` of query/key/value signals.
        in_shape: ``(nlat_in, nlon_in)`` of the key/value grid.
        out_shape: ``(nlat_out, nlon_out)`` of the query/output grid.
        grid_in, grid_out: ``"equiangular"``, ``"legendre-gauss"``, ``"lobatto"`` or
            ``"equiangular-trapezoidal"``.
        num_heads: heads ``H`` (torch-harmonics' name; default 1).
        scale: score scale; default ``1/sqrt(k_channels / H)``.
        use_qknorm: per-head RMS norm of q and k.
        bias: biases in the four 1x1 projections.
        theta_cutoff: geodesic radius in radians; default
            ``torch_harmonics.quadrature.compute_theta_cutoff`` of the coarser grid
            (output grid, or input grid when upsampling), as in torch-harmonics.
        k_channels: query/key width (default ``in_channels``).
        out_channels: value/output width (default ``in_channels``).
        optimized_kernel: ``True`` runs the library's CSR attention engine (fused
            scores, softmax and aggregation), ``False`` the generic message-passing
            path (same numbers up to rounding); the attribute ``fused`` of
            :class:`~pyg_lie.nn.S2AttentionConv`.
        heads: PyG's name for ``num_heads`` (keyword only); give either (both given and
            different is a ``ValueError``). The attribute ``heads`` equals ``num_heads``.
        explain_mode: where PyG's explainer edge mask acts (``"score"``, default, or
            ``"message"``), as in :class:`~pyg_lie.nn.S2AttentionConv`.

    Raises:
        ValueError: if neither ``nlon_in % nlon_out == 0`` nor ``nlon_out % nlon_in == 0``
            (same condition and wording as torch-harmonics), for non-positive
            ``theta_cutoff``, heads not dividing the widths, or unknown grids.

    Shapes:
        ``query (B, C_in, nlat_out, nlon_out)``, ``key``/``value``
        ``(B, C_in, nlat_in, nlon_in)`` (default: ``query``) ->
        ``(B, out_channels, nlat_out, nlon_out)``.

    Example:
        >>> import torch
        >>> from pyg_lie.nn import S2NeighborhoodAttention
        >>> _ = torch.manual_seed(0)
        >>> layer = S2NeighborhoodAttention(4, in_shape=(8, 16), out_shape=(4, 8), num_heads=2)
        >>> layer(torch.randn(3, 4, 4, 8), key=torch.randn(3, 4, 8, 16), value=torch.randn(3, 4, 8, 16)).shape
        torch.Size([3, 4, 4, 8])
    """

    _weight_suffix = (1, 1)

    def __init__(
        self,
        in_channels: int,
        in_shape: Tuple[int, int],
        out_shape: Tuple[int, int],
        grid_in: str = "equiangular",
        grid_out: str = "equiangular",
        num_heads: Optional[int] = None,
        scale: Optional[Union[Tensor, float]] = None,
        use_qknorm: bool = False,
        bias: bool = True,
        theta_cutoff: Optional[float] = None,
        k_channels: Optional[int] = None,
        out_channels: Optional[int] = None,
        optimized_kernel: bool = True,
        *,
        heads: Optional[int] = None,
        explain_mode: str = "score",
    ) -> None:
        def pair(shape) -> bool:
            return isinstance(shape, (tuple, list, torch.Size)) and len(shape) == 2

        if not (pair(in_shape) and pair(out_shape)):
            raise ValueError(f"in_shape and out_shape must be (nlat, nlon) pairs, got {in_shape} and {out_shape}")
        _check_grid(grid_in, "grid_in")
        _check_grid(grid_out, "grid_out")
        self.nlat_in, self.nlon_in = (checks.size(f"in_shape[{i}]", v) for i, v in enumerate(in_shape))
        self.nlat_out, self.nlon_out = (checks.size(f"out_shape[{i}]", v) for i, v in enumerate(out_shape))
        self.upsample = (self.nlon_out % self.nlon_in == 0) and (self.nlon_in % self.nlon_out != 0)
        if not (self.nlon_in % self.nlon_out == 0 or self.upsample):
            raise ValueError(f"either nlon_in ({self.nlon_in}) must be an integer multiple of nlon_out "
                             f"({self.nlon_out}), or vice versa, for the attention p-shift to be exact")
        if heads is not None and num_heads is not None and \
                checks.size("heads", heads) != checks.size("num_heads", num_heads):
            raise ValueError(f"heads ({heads!r}) and num_heads ({num_heads!r}) name the same number of heads "
                             f"(PyG's and torch-harmonics' spelling) but differ; pass one of them")
        num_heads = heads if heads is not None else (1 if num_heads is None else num_heads)
        super().__init__(in_channels, out_channels=out_channels, heads=num_heads, k_channels=k_channels,
                         scale=scale, use_qknorm=use_qknorm, bias=bias, fused=optimized_kernel,
                         explain_mode=explain_mode)
        self.num_heads = self.heads
        self.grid_in = grid_in
        self.grid_out = grid_out
        if theta_cutoff is None:
            from torch_harmonics.quadrature import compute_theta_cutoff

            with warnings.catch_warnings():
                # torch-harmonics warns that non-equiangular cutoffs changed in 0.9.3; not our concern
                warnings.simplefilter("ignore", UserWarning)
                if self.upsample:
                    theta_cutoff = compute_theta_cutoff(self.nlat_in, grid=grid_in)
                else:
                    theta_cutoff = compute_theta_cutoff(self.nlat_out, grid=grid_out)
        self.theta_cutoff = checks.positive_float("theta_cutoff", theta_cutoff, " (radians; None for the grid's default)")
        # build once eagerly (also reports empty neighbourhoods at construction time)
        n_iso = self._graph("cpu")["graph"].num_isolated  # type: ignore[attr-defined]
        if n_iso > 0:
            warnings.warn(f"{self.__class__.__name__}: with theta_cutoff={self.theta_cutoff:.4g}, {n_iso} of "
                          f"{self.nlat_out * self.nlon_out} output points have no neighbour within the cutoff; "
                          f"their attention output is zero before the output projection (torch-harmonics gives "
                          f"NaN there)", RuntimeWarning, stacklevel=2)

    @property
    def optimized_kernel(self) -> bool:
        """torch-harmonics' name for :attr:`fused`."""
        return self.fused

    @optimized_kernel.setter
    def optimized_kernel(self, value: bool) -> None:
        self.fused = bool(value)

    def extra_repr(self) -> str:
        return (f"in_shape={(self.nlat_in, self.nlon_in)}, out_shape={(self.nlat_out, self.nlon_out)}, "
                f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
                f"k_channels={self.k_channels}, theta_cutoff={self.theta_cutoff}")

    def __repr__(self) -> str:
        return torch.nn.Module.__repr__(self)

    def _graph(self, device) -> Dict[str, object]:
        return grid_graph((self.nlat_in, self.nlon_in), (self.nlat_out, self.nlon_out), self.grid_in,
                          self.grid_out, self.theta_cutoff, device)

    def _check(self, t: Tensor, name: str, nlat: int, nlon: int) -> None:
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, {self.in_channels}, {nlat}, {nlon}), got {tuple(t.shape)}")
        if t.shape[1] != self.in_channels or t.shape[2] != nlat or t.shape[3] != nlon:
            raise ValueError(f"{name} must have shape (B, {self.in_channels}, {nlat}, {nlon}), got "
                             f"{tuple(t.shape)}")

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                return_attention_weights: Optional[bool] = None):  # type: ignore[override]
        """Neighbourhood attention of ``query`` (output grid) over ``key``/``value`` (input grid).

        Args:
            query: ``(B, C_in, nlat_out, nlon_out)``.
            key: ``(B, C_in, nlat_in, nlon_in)``; default ``query`` (needs equal grids).
            value: ``(B, C_in, nlat_in, nlon_in)``; default ``query`` (needs equal grids).
            return_attention_weights: also return ``(edge_index, alpha)``: the neighbourhood graph
                ``(2, E)`` (row 0 an input grid point ``lat * nlon_in + lon``, row 1 an output
                grid point) and the attention weights ``alpha (E, B, heads)``.

        Returns:
            ``(B, out_channels, nlat_out, nlon_out)``, and ``(edge_index, alpha)`` with
            ``return_attention_weights=True``.
        """
        key = query if key is None else key
        value = query if value is None else value
        self._check(query, "query", self.nlat_out, self.nlon_out)
        self._check(key, "key", self.nlat_in, self.nlon_in)
        self._check(value, "value", self.nlat_in, self.nlon_in)
        if key.shape[0] != query.shape[0] or value.shape[0] != query.shape[0]:
            raise ValueError(f"query, key and value must share the batch size, got {query.shape[0]}, "
                             f"{key.shape[0]}, {value.shape[0]}")
        if key.dtype != query.dtype or value.dtype != query.dtype:
            raise ValueError(f"query, key and value must share one dtype, got {query.dtype}, {key.dtype}, "
                             f"{value.dtype}")
        checks.floating("query", query, like=self.q_weights)
        g = self._graph(query.device)
        B = query.shape[0]
        need = bool(return_attention_weights)
        if self.fused and not need and explain_mask(self, g["edge_index"].shape[1]) is None:  # type: ignore[union-attr]
            return self._forward_fused(query, key, value, g)

        def nodes(t: Tensor) -> Tensor:  # (B, C, nlat, nlon) -> (nlat * nlon, B, C)
            return t.permute(2, 3, 0, 1).reshape(-1, B, t.shape[1])

        xq = nodes(query)
        xk = xq if key is query else nodes(key)
        xv = xq if value is query else (xk if value is key else nodes(value))
        q, k, v = self.project_qkv(xq, xk, xv)
        log_w = self.log_quad_weights(g["quad_weights"], q.dtype)  # type: ignore[arg-type]
        h, alpha = self.attend(q, k, v, g["edge_index"], log_w, plan=g["graph"],  # type: ignore[arg-type]
                               need_weights=need)
        out = self.output_projection(h)  # (N_out, B, C_out)
        out = out.permute(1, 2, 0).reshape(B, self.out_channels, self.nlat_out, self.nlon_out)
        if need:
            return out, (g["edge_index"], alpha)
        return out

    # ------------------------------------------------------------------ fused grid path
    def _project_nodes(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], norm: Optional[Tensor],
                       scale) -> Tensor:
        """1x1 projection of ``(B, C, nlat, nlon)`` straight into the engine's layout
        ``(N, B * H, D)`` (batch x heads as heads), bias, qk-norm and scale folded in."""
        B, H = x.shape[0], self.heads
        W = weight.flatten(1)  # (H * D, C)
        xt = x.flatten(2).transpose(1, 2)  # (B, N, C) view: the GEMM reads the NCHW layout transposed, no copy
        if bias is not None:
            y = torch.baddbmm(bias.view(1, 1, -1), xt, W.t().expand(B, -1, -1))  # (B, N, H * D)
        else:
            y = torch.matmul(xt, W.t())
        D = y.shape[-1] // H
        y = y.view(B, -1, H, D)
        if norm is not None:  # per-head RMS norm over D with weight (1 + g), as torch-harmonics
            y = F.rms_norm(y, normalized_shape=norm.shape, weight=1 + norm)
        out = y.transpose(0, 1).reshape(-1, B * H, D)  # (N, B * H, D): one copy
        if scale is not None:
            out = out * scale
        return out

    def _forward_fused(self, query: Tensor, key: Tensor, value: Tensor, g: Dict[str, object]) -> Tensor:
        B = query.shape[0]
        graph: BipartiteCSR = g["graph"]  # type: ignore[assignment]
        q = self._project_nodes(query, self.q_weights, self.q_bias, self.q_norm_weights, self.scale)
        k = self._project_nodes(key, self.k_weights, self.k_bias, self.k_norm_weights, None)
        v = self._project_nodes(value, self.v_weights, self.v_bias, None, None)
        log_w = self.log_quad_weights(g["quad_weights"], q.dtype)  # type: ignore[arg-type]
        self._check_isolated(g["edge_index"], q.shape[0], graph)  # type: ignore[arg-type]
        o, _ = neighborhood_attention(q, k, v, log_w, graph)  # (N_out, B * H, Dv)
        o = o.reshape(o.shape[0], B, -1).permute(1, 2, 0)  # (B, C_out, N_out), read transposed by the GEMM
        P = self.proj_weights.flatten(1)
        if self.proj_bias is not None:
            out = torch.baddbmm(self.proj_bias.view(1, -1, 1), P.expand(B, -1, -1), o)
        else:
            out = torch.matmul(P, o)
        return out.view(B, self.out_channels, self.nlat_out, self.nlon_out)
