"""Fast paths and graph construction for S^2 neighbourhood attention.

Two pieces live here:

* :func:`geodesic_neighbors` -- the geodesic-radius neighbour search on the unit
  sphere used to build S^2 attention graphs. It calls
  :func:`pyg_lie.neighbors.geodesic_radius` when that module is available and
  otherwise falls back to a private chunked float64 brute force with the same
  contract (pairs with geodesic distance ``<= theta``, compared through the
  chord ``|x - y| <= 2 sin(theta / 2)``, sorted by target then source).
* :class:`NeighborhoodPlan` and :func:`planned_attention` -- a "fused CSR"
  formulation of the per-target softmax attention. Targets are grouped by their
  in-degree ``K``; inside a group every neighbourhood is a dense ``(n, K)`` index
  block, so scores, softmax and aggregation are dense tensor ops along a
  neighbour axis (no scatter in the forward pass). On equiangular-type grids
  there are only a handful of distinct degrees (one per latitude band), so the
  number of groups is small and independent of the longitude resolution.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .attention_core import dense_edge_attention

__all__ = ["geodesic_neighbors", "NeighborhoodPlan", "planned_attention"]


# --------------------------------------------------------------------------- neighbours
def _geodesic_radius_bruteforce(x: Tensor, y: Tensor, theta: float, chunk: int = 1024) -> Tensor:
    """All pairs ``(j, i)`` with ``d(x_j, y_i) <= theta`` on the unit sphere (float64 chord test).

    Args:
        x: ``(Nx, 3)`` source points (unit vectors).
        y: ``(Ny, 3)`` target points (unit vectors).
        theta: geodesic radius in radians.

    Returns:
        ``(2, E)`` int64, row 0 sources, row 1 targets, sorted by target then source.
    """
    x64 = x.detach().to(torch.float64)
    y64 = y.detach().to(torch.float64)
    if theta >= math.pi:
        r2 = 4.0 + 1.0  # every pair
    else:
        r2 = (2.0 * math.sin(0.5 * theta)) ** 2
    rows, cols = [], []
    for start in range(0, y64.shape[0], chunk):
        yc = y64[start : start + chunk]
        d2 = (yc[:, None, :] - x64[None, :, :]).pow(2).sum(-1)  # (c, Nx)
        ti, sj = torch.nonzero(d2 <= r2, as_tuple=True)  # row-major: sorted by target then source
        rows.append(sj)
        cols.append(ti + start)
    if not rows:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    return torch.stack([torch.cat(rows), torch.cat(cols)], 0).to(x.device)


def geodesic_neighbors(x: Tensor, y: Tensor, theta: float) -> Tensor:
    """Geodesic-radius neighbourhoods on the unit sphere.

    Uses :func:`pyg_lie.neighbors.geodesic_radius` when available (with
    ``max_num_neighbors=None``, i.e. no truncation) and the private float64
    brute force otherwise. Both return edges sorted by target then source.

    Args:
        x: ``(Nx, 3)`` source points on S^2.
        y: ``(Ny, 3)`` target points on S^2.
        theta: radius in radians (already including any widening factor).

    Returns:
        ``(2, E)`` edge index ``[source; target]``.
    """
    try:
        from pyg_lie.neighbors import geodesic_radius  # type: ignore
    except Exception:  # pragma: no cover - depends on the sibling module being present
        geodesic_radius = None
    if geodesic_radius is not None:
        try:
            ei = geodesic_radius(x.to(torch.float64), y.to(torch.float64), theta, max_num_neighbors=None)
            return _sort_by_target(ei, x.shape[0])
        except Exception:  # pragma: no cover - fall back on any API mismatch
            pass
    return _geodesic_radius_bruteforce(x, y, theta)


def _sort_by_target(edge_index: Tensor, num_src: int) -> Tensor:
    key = edge_index[1].to(torch.int64) * max(int(num_src), 1) + edge_index[0].to(torch.int64)
    perm = torch.argsort(key)
    return edge_index[:, perm].to(torch.long)


# --------------------------------------------------------------------------- plan
class NeighborhoodPlan:
    """Target-sorted neighbourhoods regrouped by in-degree (a bucketed CSR).

    For every distinct in-degree ``K > 0`` the plan holds

    * ``dst``: ``(n_K,)`` the targets with exactly ``K`` incoming edges,
    * ``src``: ``(n_K, K)`` their sources (ascending per row),
    * ``eid``: ``(n_K, K)`` the positions of those edges in the original ``edge_index``,

    and ``inv``: ``(num_dst,)`` the permutation that maps the concatenation
    ``[targets of group 0, group 1, ..., isolated targets]`` back to node order.

    Plans are built once per graph (Python loop over distinct degrees, data
    dependent) and then reused; all tensors live on one device (:meth:`to`).
    """

    def __init__(self, groups: List[Tuple[Tensor, Tensor, Tensor]], inv: Tensor, num_src: int,
                 num_dst: int, num_edges: int, num_isolated: int) -> None:
        self.groups = groups
        self.inv = inv
        self.num_src = int(num_src)
        self.num_dst = int(num_dst)
        self.num_edges = int(num_edges)
        self.num_isolated = int(num_isolated)

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_src: int, num_dst: int,
                        keep_order: bool = False) -> "NeighborhoodPlan":
        """Build a plan from a ``(2, E)`` edge index ``[source; target]`` (any edge order).

        Within a neighbourhood the sources are ordered by index, or, with
        ``keep_order=True``, in the order they appear in ``edge_index`` (the grid
        layer uses this to give every longitude the same summation order).
        """
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
        device = edge_index.device
        ei = edge_index.to(torch.long)
        E = ei.shape[1]
        key = ei[1] if keep_order else ei[1] * max(int(num_src), 1) + ei[0]
        perm = torch.argsort(key, stable=True)
        src_sorted = ei[0, perm]
        dst_sorted = ei[1, perm]
        deg = torch.bincount(dst_sorted, minlength=num_dst)
        ptr = torch.zeros(num_dst + 1, dtype=torch.long, device=device)
        ptr[1:] = torch.cumsum(deg, 0)
        groups = []
        order = []
        for K in torch.unique(deg).tolist():
            targets = torch.nonzero(deg == K, as_tuple=True)[0]
            if K == 0:
                continue
            pos = ptr[targets].unsqueeze(1) + torch.arange(K, device=device).unsqueeze(0)
            groups.append((targets, src_sorted[pos], perm[pos]))
            order.append(targets)
        isolated = torch.nonzero(deg == 0, as_tuple=True)[0]
        order.append(isolated)
        order_t = torch.cat(order) if order else torch.empty(0, dtype=torch.long, device=device)
        inv = torch.empty_like(order_t)
        inv[order_t] = torch.arange(order_t.numel(), device=device)
        return cls(groups, inv, num_src, num_dst, E, isolated.numel())

    def to(self, device) -> "NeighborhoodPlan":
        groups = [(d.to(device), s.to(device), e.to(device)) for d, s, e in self.groups]
        return NeighborhoodPlan(groups, self.inv.to(device), self.num_src, self.num_dst,
                                self.num_edges, self.num_isolated)

    @property
    def degrees(self) -> List[int]:
        return [int(s.shape[1]) for _, s, _ in self.groups]

    def __repr__(self) -> str:
        return (f"NeighborhoodPlan(num_src={self.num_src}, num_dst={self.num_dst}, "
                f"num_edges={self.num_edges}, degrees={self.degrees}, isolated={self.num_isolated})")


# --------------------------------------------------------------------------- attention
def planned_attention(q: Tensor, k: Tensor, v: Tensor, log_w: Optional[Tensor], plan: NeighborhoodPlan,
                      need_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    r"""Quadrature-weighted neighbourhood softmax attention on a :class:`NeighborhoodPlan`.

    .. math::
        y_i = \sum_{j \in N(i)} \frac{w_j \exp(q_i \cdot k_j)}{\sum_{l \in N(i)} w_l \exp(q_i \cdot k_l)} v_j

    computed as a softmax of ``q_i . k_j + log w_j`` over each neighbourhood.

    Args:
        q: ``(N_dst, *, H, D)`` queries (already scaled).
        k: ``(N_src, *, H, D)`` keys.
        v: ``(N_src, *, H, Dv)`` values.
        log_w: ``(N_src,)`` log quadrature weights of the sources, or ``None``.
        plan: the grouped neighbourhoods.
        need_weights: also return the attention weights in edge order ``(E, *, H)``.

    Returns:
        ``(N_dst, *, H, Dv)`` output (zeros for targets without neighbours) and
        optionally the ``(E, *, H)`` attention weights.
    """
    outs = []
    alphas = []
    extra = q.dim() - 2  # number of dims after the node dim, before D
    for dst, src, eid in plan.groups:
        n, K = src.shape
        flat = src.reshape(-1)
        qg = q.index_select(0, dst).unsqueeze(1)  # (n, 1, *, H, D)
        kg = k.index_select(0, flat).view(n, K, *k.shape[1:])  # (n, K, *, H, D)
        s = (qg * kg).sum(-1)  # (n, K, *, H)
        if log_w is not None:
            s = s + log_w.index_select(0, flat).view(n, K, *([1] * extra))
        a = dense_edge_attention(s, dim=1)
        vg = v.index_select(0, flat).view(n, K, *v.shape[1:])
        outs.append((a.unsqueeze(-1) * vg).sum(1))
        if need_weights:
            alphas.append((eid.reshape(-1), a.reshape(n * K, *a.shape[2:])))
    if plan.num_isolated > 0:
        outs.append(v.new_zeros(plan.num_isolated, *v.shape[1:]))
    if outs:
        out = torch.cat(outs, 0).index_select(0, plan.inv)
    else:
        out = v.new_zeros(plan.num_dst, *v.shape[1:])
    alpha = None
    if need_weights:
        alpha = q.new_zeros(plan.num_edges, *q.shape[1:-1])
        for eid, a in alphas:
            alpha = alpha.index_copy(0, eid, a)
    return out, alpha
