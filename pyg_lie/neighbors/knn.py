"""k-nearest-neighbour graphs in R^d, decided by the float64 rule of the radius graphs."""
from __future__ import annotations

import itertools
import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from .. import _checks as checks
from ..ops import sort_keys
from ._search import (_check_batch, _check_points, _diameter, _empty, _masked, _search, _squared_distances,
                      resolve_backend)

def knn_graph(pos: Tensor, k: int, batch: Optional[Tensor] = None, loop: bool = False,
              backend: str = "auto") -> Tensor:
    """The ``k`` nearest sources ``j`` of every target ``i`` in the same graph.

    Distances are decided as in :func:`radius_graph` (float64 squared distances of the input
    coordinates), ties broken by the smaller source index, so every backend returns the same
    edges. ``loop=True`` counts ``i`` itself as one of its ``k`` (at distance 0); a graph with
    fewer points gives each of them all it has.

    Backends: ``"kdtree"`` (CPU, the ``"auto"`` choice there) searches a k-d tree for each
    target's ``k``-th distance and decides among the points within it (ties included);
    the others evaluate all pairs of each graph (memory ``O(sum_b n_b^2)``).

    Returns:
        ``(2, E)`` int64, row 0 source ``j``, row 1 target ``i``, sorted by ``(i, j)``.
    """
    _check_points(pos, "pos")
    k = min(checks.nonnegative_int("k", k), pos.size(0))  # the same graph: no point has more neighbours (and k stays an int64)
    batch = _check_batch(batch, pos.size(0), pos.device, "batch", "pos")
    be = resolve_backend(backend, pos.device)
    if pos.size(0) == 0 or k == 0:
        return _empty(pos.device)
    if be == "kdtree":
        return _knn_kdtree(pos, k, batch, bool(loop))
    return _search(pos, pos, math.inf, batch, batch, True, bool(loop), k, be, all_pairs=True)


@torch.no_grad()
def _knn_kdtree(pos: Tensor, k: int, batch: Optional[Tensor], loop: bool) -> Tensor:
    """:func:`knn_graph` by a k-d tree: candidates within each target's ``k``-th tree distance
    (plus a rounding slack), then the shared float64 decision and ranking."""
    from scipy.spatial import cKDTree

    N = pos.size(0)
    if not math.isfinite(_diameter(pos, pos) ** 2 * (pos.size(1) + 1)):  # the tree's distances would overflow
        return _search(pos, pos, math.inf, batch, batch, True, loop, k, "cdist", all_pairs=True)
    P = pos.detach().to("cpu", torch.float64).numpy()
    if batch is None:
        gid = np.zeros(N, dtype=np.int64)
    else:
        gid = torch.unique(batch, return_inverse=True)[1].cpu().numpy()
    n_node = np.bincount(gid)[gid]  # size of every point's graph
    m = np.minimum(k + (0 if loop else 1), n_node)  # nearest in the tree, the point itself included
    diam = float(np.linalg.norm(P.max(0) - P.min(0))) if N else 0.0
    if gid.max() > 0:  # graphs apart along an extra axis, farther than any search radius
        P = np.concatenate([P, (gid.astype(np.float64) * (2.0 * diam + 1.0))[:, None]], axis=1)
    tree = cKDTree(P, balanced_tree=False, compact_nodes=False)
    kq = int(m.max()) + 1  # one more: is the next point as near as the m-th (a tie to resolve)?
    dist, idx = tree.query(P, k=kq)
    dist, idx = dist.reshape(N, kq), idx.reshape(N, kq)
    rows = np.arange(N)
    rel = 8.0 * (P.shape[1] + 2) * float(np.finfo(np.float64).eps)
    rad = dist[rows, m - 1] * (1.0 + rel) + 1e-300
    near = np.arange(kq)[None, :] < m[:, None]
    tie = dist[rows, m] <= rad  # beyond the own graph (or the cloud) the distance is larger or inf
    near[tie] = False
    src_parts, tgt_parts = [idx[near]], [np.repeat(rows, near.sum(1))]
    if tie.any():  # every point within the m-th distance (rounding slack included) of those targets
        t = rows[tie]
        cand = tree.query_ball_point(P[t], rad[t])
        lens = np.fromiter((len(c) for c in cand), dtype=np.int64, count=t.size)
        src_parts.append(np.fromiter(itertools.chain.from_iterable(cand), dtype=np.int64, count=int(lens.sum())))
        tgt_parts.append(np.repeat(t, lens))
    src = torch.from_numpy(np.concatenate(src_parts).astype(np.int64))
    tgt = torch.from_numpy(np.concatenate(tgt_parts).astype(np.int64))
    if not loop:
        src, tgt = _masked(src != tgt, src, tgt)
    src, tgt = src.to(pos.device), tgt.to(pos.device)
    d2 = _squared_distances(pos, pos, src, tgt)
    # nearest first, ties by source index: stable sorts on (source), (d2), then (target)
    o = torch.sort(src, stable=True).indices
    o = o[torch.sort(d2[o], stable=True).indices]
    o = o[torch.sort(tgt[o], stable=True).indices]
    tgt_o = tgt[o]
    counts = torch.bincount(tgt_o, minlength=N)
    rank = torch.arange(o.numel(), device=pos.device) - (torch.cumsum(counts, 0) - counts)[tgt_o]
    keep = o[rank < k]
    key = sort_keys(tgt[keep] * N + src[keep])
    return torch.stack([key % N, torch.div(key, N, rounding_mode="floor")])
