r"""Edges between lifted nodes.

Neighbourhoods are decided on the *base* positions: a radius graph (or the
complete graph of every cloud) on ``pos`` is invariant to every isometry, so
unlike neighbourhoods computed from sampled lifts (the official
implementation) it does not depend on the random lift. Every base edge
``j -> i`` (self loops included, so that a point also attends to its own other
lifts) becomes the ``K x K`` lifted edges ``(j K + b) -> (i K + a)``.

The original code's neighbourhood is also offered (:func:`lifted_knn_edges`): every lifted
node attends to its ``k`` nearest lifted nodes of its cloud in the log-map distance
below (itself included), optionally a uniform random subset of them (the paper's QM9
setting: 25 nearest, 20 sampled). The distance is left-invariant and ties are kept
together, so the neighbourhood moves with the lift: exactly for a finite lift under its
subgroup, in distribution for Haar lifts.

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

import math
from typing import Dict, Optional

import torch
from torch import Tensor

from .. import _checks, ops
from .._checks import batch_vector, nonnegative_float, optional_length, positive_int
from .._tracing import compiling
from ..groups import LieGroup

__all__ = ["full_graph", "base_graph", "expand_edges", "subsample_edges", "threshold_edges",
           "lifted_knn_edges", "lifted_edges"]


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
    ei = ops.complete_edges(ptr)
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
    if not compiling() and bool((dst[1:] < dst[:-1]).any()):
        raise ValueError("edge_index must be sorted by target (row 1); sort it first, e.g. with "
                         "torch_geometric.utils.sort_edge_index(edge_index, sort_by_row=False)")
    deg = torch.bincount(dst, minlength=num_points)
    ptr = _pointer(deg)  # first base edge of each target, and E
    return ops.expand_edges(ptr, src, K)


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


def _padded(batch: Tensor):
    """Cloud sizes ``(B,)``, first node ``(B,)`` and the slot of every node in a ``(B, L)`` layout."""
    counts = torch.unique_consecutive(batch, return_counts=True)[1]
    start = torch.cumsum(counts, 0) - counts
    cloud = torch.repeat_interleave(torch.arange(counts.numel(), device=batch.device), counts)
    slot = torch.arange(batch.numel(), device=batch.device) - start[cloud]
    return counts, start, cloud, slot


def _rigid_log_distances(R: Tensor, t: Tensor) -> Tensor:
    r"""Squared log-map distances ``d^2 = |u|^2 + 2 theta^2`` of SE(3) / T(3) / SO(3) within clouds.

    ``R (B, L, 3, 3)``, ``t (B, L, 3)`` (float64, padded) -> ``(B, L, L)`` with entry
    ``[b, p, q]`` the distance of ``g_p^{-1} g_q``. With ``theta`` the angle of
    ``R_p^T R_q`` and ``v = R_p^T (t_q - t_p)``, ``u = V^{-1} v`` has
    ``|u|^2 = |v|^2 + f(theta) (|v|^2 - v^T R_p^T R_q v)``,
    ``f = (phi^2 - 1) / (1 - cos theta)``, ``phi = (theta/2) / sin(theta/2)`` (the singular
    value of ``V^{-1}`` across the axis), which needs no rotation axis and is continuous
    at ``theta = pi``. Every term is a Frobenius product of per-node features, so the
    whole matrix is three batched matrix products (no per-pair 4x4 matrices).
    """
    B, L = t.shape[:2]
    Rf = R.reshape(B, L, 9)
    a = torch.einsum("blji,blj->bli", R, t)  # R^T t
    tt = (t * t).sum(-1)
    cos = ((Rf @ Rf.transpose(1, 2)) - 1.0) / 2.0  # (tr(R_p^T R_q) - 1) / 2
    theta = torch.acos(cos.clamp(-1.0, 1.0))
    dt2 = tt[:, :, None] + tt[:, None, :] - 2.0 * (t @ t.transpose(1, 2))
    # v^T R_p^T R_q v = (R_q^T dt) . (R_p^T dt), dt = t_q - t_p, expanded into four products
    ta = (t[..., :, None] * a[..., None, :]).reshape(B, L, 9)  # t a^T
    tR = (t[..., :, None, None] * R.transpose(-1, -2)[..., None, :, :]).reshape(B, L, 27)  # t_j R_lk
    Rt = (R[..., :, :, None] * t[..., None, None, :]).reshape(B, L, 27)  # R_jk t_l
    vrv = (Rf @ ta.transpose(1, 2) - a @ a.transpose(1, 2) - tR @ Rt.transpose(1, 2)
           + ta @ Rf.transpose(1, 2))
    x = theta / 2
    s2 = torch.sin(x) ** 2
    small = x < 1e-3
    f = torch.where(small, 1.0 / 6.0 + 4.0 * x * x / 45.0,
                    (x * x - s2) / (2.0 * s2 * s2).clamp_min(1e-300))
    dt2 = dt2.clamp_min(0.0)
    return dt2 + f * (dt2 - vrv).clamp_min(0.0) + 2.0 * theta * theta


@torch.no_grad()
def _cloud_distances(group: LieGroup, g: Tensor, cloud: Tensor, slot: Tensor, counts: Tensor) -> Tensor:
    """Log-map distances of all lifted pairs per cloud, ``(B, L, L)`` float64, ``inf`` off the clouds."""
    B, L = counts.numel(), int(counts.max())
    gg = g.detach().to(torch.float64)
    if group.name in ("SE3", "T3", "SO3"):
        m = g.shape[-1]
        R = torch.eye(3, dtype=torch.float64, device=g.device).expand(B, L, 3, 3).clone()
        t = torch.zeros(B, L, 3, dtype=torch.float64, device=g.device)
        R[cloud, slot] = gg[:, :3, :3]
        if m == 4:
            t[cloud, slot] = gg[:, :3, 3]
        d2 = _rigid_log_distances(R, t)
    else:  # any group: exact logs, one cloud at a time
        d2 = torch.full((B, L, L), math.inf, dtype=torch.float64, device=g.device)
        start = 0
        for b, n in enumerate(counts.tolist()):
            gb = gg[start:start + n]
            rel = group.between(gb[:, None].expand(n, n, *gb.shape[1:]).reshape(-1, *gb.shape[1:]),
                                gb[None].expand(n, n, *gb.shape[1:]).reshape(-1, *gb.shape[1:]))
            d2[b, :n, :n] = log_distance(group, group.log(rel)).pow(2).view(n, n)
            start += n
    valid = torch.arange(L, device=g.device)[None, :] < counts[:, None]
    return d2.masked_fill(~(valid[:, :, None] & valid[:, None, :]), math.inf)


def lifted_knn_edges(g: Tensor, batch: Optional[Tensor], group: LieGroup, k: int,
                     sample: Optional[int] = None, generator: Optional[torch.Generator] = None) -> Tensor:
    r"""The ``k`` nearest lifted nodes of every lifted node in the log-map distance.

    ``d(g_i, g_j) = ||vee(log(g_i^{-1} g_j))||`` (this library's coordinates: for SE(3)
    ``d^2 = |u|^2 + 2 theta^2``) within each cloud, the node itself included (it is its
    own nearest). Distances within a rounding tolerance of the ``k``-th are kept together
    (so a target may get more than ``k`` sources): with a finite lift, whose elements are
    at exactly equal distances from each other, the neighbourhood is then the same set
    whatever the order of the lifts, and the model exactly invariant. ``sample`` keeps a
    uniform random subset of that many per target (the original code's sampled
    neighbourhood; invariant in distribution only).

    SE(3), T(3) and SO(3) use a closed form of ``d`` as batched matrix products over the
    nodes of each cloud; other groups evaluate the logs of all pairs of a cloud. Cost
    ``O(sum_b (n_b K)^2)`` distances, computed once per forward and shared by all layers;
    the attention then runs on ``N K k`` edges.

    Args:
        g: ``(M, m, m)`` lifted elements, nodes of a cloud contiguous.
        batch: ``(M,)`` sorted cloud ids (``None``: one cloud).
        group: the group of ``g``.
        k: neighbours per lifted node, itself included.
        sample: keep a random subset of at most this many per target (``None``: all).
        generator: random source of ``sample``.

    Returns:
        ``(2, E)`` int64 edge index, row 0 source, row 1 target, sorted by target then source.
    """
    k = positive_int("k", k)
    if sample is not None:
        sample = positive_int("sample", sample)
    M = g.shape[0]
    if batch is None:
        batch = torch.zeros(M, dtype=torch.long, device=g.device)
    batch_vector(batch, M, "lifted node")
    if M == 0:
        return torch.empty(2, 0, dtype=torch.long, device=g.device)
    batch = _checks.plain_index("batch", batch)
    if bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("batch must be sorted (the nodes of a cloud contiguous, the PyG convention)")
    counts, start, cloud, slot = _padded(batch)
    D = _cloud_distances(group, g, cloud, slot, counts)[cloud, slot]  # (M, L) squared distances
    L = D.shape[1]
    k_row = torch.clamp(counts[cloud], max=k)
    # rounding tolerance on d^2, relative to the input's precision (a rotated copy of the same
    # cloud must see the same ties)
    rtol = 1e3 * torch.finfo(g.dtype if g.dtype.is_floating_point else torch.float32).eps
    kk = min(L, k + max(8, k // 2))
    while True:
        val, idx = torch.topk(D, kk, dim=1, largest=False, sorted=True)
        kth = val.gather(1, (k_row - 1)[:, None])
        thr = kth * (1.0 + rtol) + rtol
        keep = val <= thr
        if kk == L or not bool(keep[:, -1].any()):
            break
        kk = min(L, 2 * kk)  # a tie reaches past the candidates: look further
    idx = torch.where(keep, idx, L)
    idx, _ = torch.sort(idx, dim=1)  # sources in index order
    keep = idx < L
    src = (start[cloud][:, None] + idx)[keep]
    dst = torch.arange(M, device=g.device)[:, None].expand_as(idx)[keep]
    ei = torch.stack([src, dst])
    if sample is not None:
        ei = subsample_edges(ei, M, sample, generator)
    return ei


def lifted_edges(pos: Tensor, batch: Optional[Tensor], num_lifts: int, radius: Optional[float] = None,
                 *, g: Optional[Tensor] = None, group: Optional[LieGroup] = None,
                 max_num_neighbors: Optional[int] = None, log_threshold: Optional[float] = None,
                 distance_weights: Optional[Dict[str, float]] = None, loop: bool = True,
                 generator: Optional[torch.Generator] = None, backend: str = "auto",
                 edge_index: Optional[Tensor] = None, nearest: Optional[int] = None) -> Tensor:
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
        nearest: the ``nearest`` lifted nodes of each lifted node in the log-map distance
            (:func:`lifted_knn_edges`, needs ``g`` and ``group``) instead of a base graph;
            ``max_num_neighbors`` then samples among them. Excludes ``radius``,
            ``edge_index`` and ``log_threshold``.

    Returns:
        ``(2, E)`` edge index over the ``N K`` lifted nodes.
    """
    radius = optional_length("radius", radius, "all pairs of each cloud")
    N = pos.size(0)
    if batch is not None:
        batch_vector(batch, N, "point")
    num_lifts = positive_int("num_lifts", num_lifts)
    if nearest is not None:
        for name, value in (("radius", radius), ("edge_index", edge_index), ("log_threshold", log_threshold)):
            if value is not None:
                raise ValueError(f"nearest (log-map nearest neighbours) and {name} both choose the neighbourhood; "
                                 f"pass one of them")
        if g is None or group is None:
            raise ValueError("nearest needs the lifted elements g and the group")
        lifted_batch = None if batch is None else batch.repeat_interleave(num_lifts)
        return lifted_knn_edges(g, lifted_batch, group, nearest, sample=max_num_neighbors, generator=generator)
    if edge_index is None:
        edge_index = base_graph(pos, batch, radius, loop=loop, backend=backend)
    else:  # any order; expand_edges wants it sorted by target
        _checks.edge_index(edge_index)
        edge_index = _checks.index_tensor("edge_index", edge_index, N, "point")
        edge_index = edge_index[:, ops.argsort_keys(edge_index[1] * max(N, 1) + edge_index[0])[1]]
    ei = expand_edges(edge_index, N, num_lifts)
    if log_threshold is not None:
        if g is None or group is None:
            raise ValueError("log_threshold needs the lifted elements g and the group")
        ei = threshold_edges(ei, g, group, optional_length("log_threshold", log_threshold, "no threshold"),
                             distance_weights)
    if max_num_neighbors is not None:
        ei = subsample_edges(ei, N * num_lifts, positive_int("max_num_neighbors", max_num_neighbors), generator)
    return ei
