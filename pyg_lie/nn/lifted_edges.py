r"""Edges between lifted nodes.

Neighbourhoods are decided on the *base* positions: a radius graph (or the
complete graph of every cloud) on ``pos`` is invariant to every isometry, so
unlike neighbourhoods computed from sampled lifts (the official
implementation) it does not depend on the random lift. Every base edge
``j -> i`` (self loops included, so that a point also attends to its own other
lifts) becomes the ``K x K`` lifted edges ``(j K + b) -> (i K + a)``.

Two optional reductions from the paper (Sec. 3.2):

* **uniform subsampling** to at most ``k`` incoming edges per lifted node
  (equivariant in expectation only);
* **log-map threshold**: keep ``g' -> g`` only when
  ``d(g, g') = sqrt( sum_b w_b ||xi_b||^2 ) <= eta`` with
  ``xi = vee(log(g^{-1} g'))`` split into the group's blocks ``b`` (e.g.
  ``translation`` and ``rotation``; in this library's Frobenius-orthonormal
  basis the SE(2) rotation coordinate is ``sqrt(2) theta``) and block weights
  ``w_b`` (default 1 for every block, i.e. the plain ``||xi||``). A function of
  ``g^{-1} g'`` only, hence invariant.

All outputs are PyG ``edge_index`` tensors ``(2, E)``, row 0 = source,
row 1 = target, sorted by target then source (before subsampling or
thresholding, which keep the order).
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor

from .. import _checks
from .._checks import batch_vector, nonnegative_float, optional_length, positive_int
from .._sort import argsort_keys
from ..groups import LieGroup
from ..ops import graph as _graph

__all__ = ["full_graph", "base_graph", "expand_edges", "subsample_edges", "threshold_edges",
           "lifted_edges"]


def _pointer(counts: Tensor) -> Tensor:
    """``(n + 1,)`` offsets ``0, c_0, c_0 + c_1, ...`` of consecutive runs of ``counts (n,)``."""
    ptr = counts.new_zeros(counts.numel() + 1)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr


def full_graph(batch: Tensor, loop: bool = True) -> Tensor:
    """All ordered pairs ``(j, i)`` of points in the same graph.

    Args:
        batch: ``(N,)`` graph ids, sorted (the PyG convention).
        loop: include ``(i, i)``.

    Returns:
        ``(2, sum_b n_b^2)`` edge index sorted by target then source.
    """
    batch = _checks.plain_index("batch", batch)
    N = batch.numel()
    device = batch.device
    if N == 0:
        return torch.empty(2, 0, dtype=torch.long, device=device)
    if bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("batch must be sorted (graphs stored contiguously, the PyG convention)")
    counts = torch.unique_consecutive(batch, return_counts=True)[1]
    ptr = _pointer(counts)  # first node of every graph, and N
    ei = _graph.complete_edges(ptr)
    if not loop:
        ei = ei[:, ei[0] != ei[1]]
    return ei


def base_graph(pos: Tensor, batch: Optional[Tensor], radius: Optional[float], loop: bool = True,
               backend: str = "auto") -> Tensor:
    """Radius graph on base positions (``radius=None``: complete graph per cloud)."""
    if batch is None:
        batch = torch.zeros(pos.size(0), dtype=torch.long, device=pos.device)
    if radius is None:
        return full_graph(batch, loop=loop)
    from ..neighbors import radius_graph
    return radius_graph(pos, radius, batch=batch, loop=loop, max_num_neighbors=None, backend=backend)


def expand_edges(edge_index: Tensor, num_points: int, K: int) -> Tensor:
    """Expand base edges to all ``K x K`` lift pairs.

    Args:
        edge_index: ``(2, E)`` base edges sorted by target, indices in ``[0, num_points)``.
        num_points: ``N``.
        K: lifts per point (lifted node ``i K + a``), a positive int.

    Returns:
        ``(2, E K^2)`` int64 lifted edges sorted by lifted target, then source.

    Raises:
        ValueError: ``K`` or ``num_points`` is not a positive / non-negative int, an index
            lies outside ``[0, num_points)``, or the edges are not sorted by target.
    """
    K = positive_int("K", K)
    num_points = _checks.nonnegative_int("num_points", num_points)
    _checks.edge_index(edge_index)
    edge_index = _checks.index_tensor("edge_index", edge_index, num_points, "point")
    if K == 1:
        return edge_index
    src, dst = edge_index
    E = src.numel()
    if E == 0:
        return edge_index.new_empty(2, 0)
    if not torch.compiler.is_compiling() and bool((dst[1:] < dst[:-1]).any()):
        raise ValueError("edge_index must be sorted by target (row 1); sort it first, e.g. with "
                         "torch_geometric.utils.sort_edge_index(edge_index, sort_by_row=False)")
    deg = torch.bincount(dst, minlength=num_points)
    ptr = _pointer(deg)  # first base edge of each target, and E
    return _graph.expand_edges(ptr, src, K)


def subsample_edges(edge_index: Tensor, num_nodes: int, k: int,
                    generator: Optional[torch.Generator] = None) -> Tensor:
    """Keep a uniform random subset of at most ``k`` incoming edges per target."""
    E = edge_index.size(1)
    if E == 0:
        return edge_index
    dst = edge_index[1]
    key = torch.rand(E, generator=generator).to(edge_index.device)
    perm = torch.argsort(key)
    perm = perm[torch.argsort(dst[perm], stable=True)]
    deg = torch.bincount(dst, minlength=num_nodes)
    start = torch.cumsum(deg, 0) - deg
    rank = torch.arange(E, device=dst.device) - start[dst[perm]]
    keep = perm[rank < k]
    keep, _ = torch.sort(keep)  # restore the (target, source) order
    return edge_index[:, keep]


def check_distance_weights(group: LieGroup, weights: Optional[Dict[str, float]]) -> None:
    """ValueError unless ``weights`` maps some of ``group``'s blocks to finite numbers >= 0."""
    if not weights:
        return
    unknown = set(weights) - set(group.blocks)
    if unknown:
        raise ValueError(f"distance_weights has blocks {sorted(unknown)} that {group.name} does not have; "
                         f"its blocks are {list(group.blocks)}")
    for name, w in weights.items():
        nonnegative_float(f"distance_weights[{name!r}]", w)


def log_distance(group: LieGroup, xi: Tensor, weights: Optional[Dict[str, float]] = None) -> Tensor:
    r"""``d = sqrt(sum_b w_b ||xi_b||^2)`` for algebra coordinates ``xi (E, dim)``."""
    if not weights:
        return xi.norm(dim=-1)
    check_distance_weights(group, weights)
    sq = xi.new_zeros(xi.shape[:-1])
    for name, sl in group.blocks.items():
        sq = sq + float(weights.get(name, 1.0)) * xi[..., sl].pow(2).sum(-1)
    return sq.sqrt()


def threshold_edges(edge_index: Tensor, g: Tensor, group: LieGroup, eta: float,
                    weights: Optional[Dict[str, float]] = None) -> Tensor:
    """Keep lifted edges with ``d(g_i, g_j) <= eta`` (see the module docstring)."""
    if edge_index.size(1) == 0:
        return edge_index
    with torch.no_grad():
        d = log_distance(group, group.relative_log(g, edge_index), weights)
    return edge_index[:, d <= eta]


def lifted_edges(pos: Tensor, batch: Optional[Tensor], num_lifts: int, radius: Optional[float] = None,
                 *, g: Optional[Tensor] = None, group: Optional[LieGroup] = None,
                 max_num_neighbors: Optional[int] = None, log_threshold: Optional[float] = None,
                 distance_weights: Optional[Dict[str, float]] = None, loop: bool = True,
                 generator: Optional[torch.Generator] = None, backend: str = "auto",
                 edge_index: Optional[Tensor] = None) -> Tensor:
    """Lifted edges: base radius graph (or a given base graph), expanded to lift pairs,
    optionally reduced.

    Args:
        pos: ``(N, n)`` base positions; ``batch`` ``(N,)`` or ``None``.
        num_lifts: ``K``.
        radius: base neighbourhood radius (``None``: all pairs in each cloud).
        g, group: lifted elements ``(N K, m, m)`` and the group, needed for
            ``log_threshold``.
        max_num_neighbors: uniform subsampling to at most this many incoming
            lifted edges per lifted node.
        log_threshold: ``eta`` of the log-map distance threshold.
        distance_weights: block weights of that distance (``{"rotation": w}``).
        loop: base self loops (a point attends to all its own lifts).
        edge_index: a base graph ``(2, E)`` over the points (row 0 source, row 1 target), e.g.
            from ``torch_geometric.transforms.RadiusGraph``, used as it is instead of the radius
            graph (``radius`` and ``loop`` are then ignored: include self loops in it for a
            point to attend to its own lifts).

    Returns:
        ``(2, E)`` edge index over the ``N K`` lifted nodes.
    """
    radius = optional_length("radius", radius, "all pairs of each cloud")
    N = pos.size(0)
    if batch is not None:
        batch_vector(batch, N, "point")
    num_lifts = positive_int("num_lifts", num_lifts)
    if edge_index is None:
        edge_index = base_graph(pos, batch, radius, loop=loop, backend=backend)
    else:  # any order; expand_edges wants it sorted by target
        _checks.edge_index(edge_index)
        edge_index = _checks.index_tensor("edge_index", edge_index, N, "point")
        edge_index = edge_index[:, argsort_keys(edge_index[1] * max(N, 1) + edge_index[0])[1]]
    ei = expand_edges(edge_index, N, num_lifts)
    if log_threshold is not None:
        if g is None or group is None:
            raise ValueError("log_threshold needs the lifted elements g and the group")
        ei = threshold_edges(ei, g, group, optional_length("log_threshold", log_threshold, "no threshold"),
                             distance_weights)
    if max_num_neighbors is not None:
        ei = subsample_edges(ei, N * num_lifts, positive_int("max_num_neighbors", max_num_neighbors), generator)
    return ei
