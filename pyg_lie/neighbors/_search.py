"""Graphs: radius neighbourhoods (Euclidean, geodesic on S^2), complete graphs and log-metric
graphs of group elements.

* :func:`radius_graph`, :func:`radius`, :func:`geodesic_radius_graph`, :func:`geodesic_radius`:
  radius neighbourhoods of points (the rest of this docstring).
* :func:`complete_graph`: every ordered pair of nodes of the same graph.
* :func:`knn_graph`: the ``k`` nearest points of every point, by the same float64 rule.
* :func:`log_knn_graph`, :func:`log_radius_graph`: k nearest neighbours and radius graphs of
  group elements in the invariant metric ``||log(g_i^{-1} g_j)||``.

All functions return a PyG-style ``edge_index`` of shape ``(2, E)`` (int64, on
the device of the input points): row 0 holds the *source* ``j`` (a neighbour),
row 1 the *target* ``i`` (the query point), sorted by ``(i, j)``.

Exact, backend-independent decision
-----------------------------------
Every backend only produces a *candidate superset* (searched with a radius
enlarged by a few ulps). The final decision is taken once, in a shared step,
in float64 on the input coordinates::

    keep (j, i)  iff  sum_k (float64(pos_j[k]) - float64(pos_i[k]))**2 <= float64(r)**2

so the boundary is inclusive and all backends return the identical edge set,
for float32 and float64 inputs alike (with integer coordinates the decision is
exact). The geodesic functions use the chord radius ``2 sin(theta / 2)``
(computed in float64) in the same rule; ``theta >= pi`` returns all pairs.

Truncation
----------
``max_num_neighbors=None`` (the default) never truncates (torch-cluster's
default of 32 is not used). With ``max_num_neighbors=k`` every target keeps its
``k`` nearest sources, ties in the float64 squared distance broken by the
smaller source index; the result is the same for every backend. With
``loop=True`` the self loop counts as one of the ``k``.

Backends
--------
* ``"kdtree"``: :class:`scipy.spatial.cKDTree` (CPU only). One tree per large
  graph; consecutive small graphs (up to ``KDTREE_GROUP`` points together)
  share a tree in which the graph id times a separation larger than the
  radius is an extra coordinate, so graphs never connect and batches of many
  small molecules do not loop in Python per graph. ``query_pairs`` for
  ``radius_graph``, ``sparse_distance_matrix`` for the bipartite ``radius``
  (both measured several times faster than ``query_ball_point``).
* ``"torch_cluster"``: :func:`torch_cluster.radius` (CPU and CUDA), imported
  lazily. It truncates silently, so it is called with a bound and the targets
  whose count reached the bound are searched again with a larger one.
* ``"cdist"``: chunked :func:`torch.cdist`, no extra dependency, any device;
  ``O(N_x N_y)`` work per graph, memory bounded by ``chunk_elements``.
* ``"auto"``: on CPU ``"kdtree"`` (if scipy imports; else ``"torch_cluster"``
  if installed; else ``"cdist"``); on CUDA ``"torch_cluster"`` if installed,
  else ``"cdist"``; on other devices ``"cdist"``. The CPU rule is measured by
  ``pyg-lie bench neighbors`` (``docs/neighbors.md``): on a small CPU the k-d tree
  beat torch-cluster from about 10k points on, and ``cdist`` was several times slower.
  Before any of these, :func:`radius_graph` with ``"auto"`` on CPU, points in 1
  to 3 dimensions, a sorted (or no) ``batch`` and no truncation runs the native
  cell lists of ``_native/radius_graph.c``: one pass, the same float64 rule
  (products and sums rounded one by one, as in the shared step), the edges
  already in order (several times faster than the k-d tree; run
  ``pyg-lie bench neighbors`` to see the ratios on a machine).

Batches need not be sorted and graph ids may be any integers.
"""
from __future__ import annotations

import functools
import itertools
import math
import numbers
from typing import Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from . import _checks as checks
from ._checks import nonnegative_int, positive_int
from ._sort import argsort_keys, sort_keys
from .groups import LieGroup, get_group
from .groups.base import LogNormEmbedding, _is_compiling, chart_safe_log
from .ops import native_available
from .ops.graph import complete_edges
from .ops.graph import radius_graph as radius_graph_op

__all__ = [
    "radius_graph",
    "radius",
    "geodesic_radius_graph",
    "geodesic_radius",
    "complete_graph",
    "knn_graph",
    "log_knn_graph",
    "log_radius_graph",
    "GRAPH_METHODS",
    "resolve_backend",
    "available_backends",
    "BACKENDS",
]

BACKENDS = ("auto", "kdtree", "torch_cluster", "cdist")

#: Consecutive graphs are put in one k-d tree (with an extra separating axis)
#: while their points number at most this; larger graphs get a tree each.
KDTREE_GROUP = 4096

#: Number of distance-matrix entries one ``cdist`` chunk may hold.
CDIST_CHUNK_ELEMENTS = 1 << 22

#: Consecutive small graphs share one masked ``cdist`` block while it holds at
#: most this many entries (the cross-graph entries are wasted work).
CDIST_GROUP_ELEMENTS = 1 << 16

#: First ``max_num_neighbors`` bound passed to torch-cluster, per device type
#: (its CUDA kernel allocates ``N_y * max_num_neighbors`` slots; on CPU the
#: largest graph size is passed at once). Targets that fill the bound are
#: searched again with a 4x larger one.
_TC_START = {"cuda": 128}


# ----------------------------------------------------------------- backends
@functools.lru_cache(maxsize=None)
def _torch_cluster_available() -> bool:
    try:
        import torch_cluster  # noqa: F401
    except Exception:  # ImportError, or an OSError from a mismatched build
        return False
    return True


@functools.lru_cache(maxsize=None)
def _scipy_available() -> bool:
    try:
        from scipy.spatial import cKDTree  # noqa: F401
    except Exception:
        return False
    return True


def available_backends(device: torch.device | str = "cpu") -> Tuple[str, ...]:
    """Backends (other than ``"auto"``) usable for points on ``device``."""
    device = torch.device(device)
    out = []
    if device.type == "cpu" and _scipy_available():
        out.append("kdtree")
    if device.type in ("cpu", "cuda") and _torch_cluster_available():
        out.append("torch_cluster")
    out.append("cdist")
    return tuple(out)


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """Turn ``backend`` (possibly ``"auto"``) into a concrete backend for ``device``.

    Raises:
        ValueError: unknown backend, ``"torch_cluster"`` without torch-cluster
            installed, ``"kdtree"`` for a non-CPU device or without scipy.
    """
    device = torch.device(device)
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        if device.type == "cpu":
            if _scipy_available():
                return "kdtree"
            return "torch_cluster" if _torch_cluster_available() else "cdist"
        if device.type == "cuda" and _torch_cluster_available():
            return "torch_cluster"
        return "cdist"
    if backend == "torch_cluster":
        if not _torch_cluster_available():
            raise ValueError(
                "backend='torch_cluster' needs the torch-cluster package, which is not installed "
                "(or does not import); install it (`pip install pyg_lie[cluster]`, or the wheel "
                "in shared/wheels) or use backend='auto', 'kdtree' (CPU) or 'cdist'"
            )
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"backend='torch_cluster' supports CPU and CUDA tensors, got device "
                             f"{device}; use backend='cdist'")
    if backend == "kdtree":
        if device.type != "cpu":
            raise ValueError(f"backend='kdtree' (scipy cKDTree) runs on CPU only, got points on "
                             f"{device}; use backend='auto', 'torch_cluster' or 'cdist', or move "
                             f"the points to the CPU")
        if not _scipy_available():
            raise ValueError("backend='kdtree' needs scipy (`pip install scipy`); "
                             "or use backend='cdist'")
    return backend


# --------------------------------------------------------------- validation
def _check_points(pos: Tensor, name: str, dim: Optional[int] = None) -> None:
    if not isinstance(pos, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape (N, d), got {type(pos).__name__}")
    if pos.dim() != 2:
        raise ValueError(f"{name} must be 2-D of shape (N, d), got shape {tuple(pos.shape)}; "
                         f"reshape it, e.g. {name}.view(-1, d)")
    if not pos.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {pos.dtype}; "
                         f"convert it with {name}.float()")
    if dim is not None and pos.size(1) != dim:
        raise ValueError(f"{name} must have {dim} columns, got shape {tuple(pos.shape)}")
    if pos.numel() and not bool(torch.isfinite(pos).all()):
        raise ValueError(f"{name} contains NaN or infinite entries; remove or fix those points")


def _check_scalar(r, name: str) -> float:
    if isinstance(r, Tensor):
        if r.numel() != 1:
            raise ValueError(f"{name} must be a number, got a tensor of shape {tuple(r.shape)}")
        r = r.item()
    if isinstance(r, bool) or not isinstance(r, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {type(r).__name__}")
    r = float(r)
    if not math.isfinite(r) or r < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {r}")
    return r


def _check_batch(batch: Optional[Tensor], n: int, device: torch.device, name: str,
                 pos_name: str) -> Optional[Tensor]:
    if batch is None:
        return None
    if not isinstance(batch, Tensor):
        raise ValueError(f"{name} must be a 1-D integer tensor or None, got {type(batch).__name__}")
    if batch.dim() != 1 or batch.numel() != n:
        raise ValueError(f"{name} must be 1-D of length {pos_name}.size(0) = {n}, got shape "
                         f"{tuple(batch.shape)}")
    if batch.dtype == torch.bool or batch.is_floating_point() or batch.is_complex():
        raise ValueError(f"{name} must have an integer dtype, got {batch.dtype}; use {name}.long()")
    if batch.device != device:
        raise ValueError(f"{name} is on {batch.device} but {pos_name} is on {device}; "
                         f"move it with {name}.to({pos_name}.device)")
    return batch.long()


def _check_k(k) -> Optional[int]:
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise ValueError(f"max_num_neighbors must be None (no truncation) or an int >= 0, got {k!r}")
    return min(int(k), 1 << 62)  # beyond any point count; keeps comparisons in int64


def _check_unit(pos: Tensor, name: str) -> None:
    if pos.numel() == 0:
        return
    norm = pos.double().norm(dim=1)
    tol = 1e-6 if pos.dtype == torch.float64 else max(1e-3, 10 * torch.finfo(pos.dtype).eps)
    bad = (norm - 1).abs() > tol
    if bool(bad.any()):
        worst = float(norm[bad][0])
        raise ValueError(f"{name} must hold unit vectors (points on S^2); found norm {worst:.6g}; "
                         f"normalise with {name} / {name}.norm(dim=-1, keepdim=True)")


# ---------------------------------------------------------------- core step
def _empty(device: torch.device) -> Tensor:
    return torch.empty(2, 0, dtype=torch.long, device=device)


def _search_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _candidate_radius(r: float, dtype: torch.dtype, d: int, diameter: float) -> float:
    """A radius that finds every pair the float64 rule keeps, whatever the backend's rounding."""
    rel = 8.0 * (d + 2) * torch.finfo(dtype).eps
    rc = min(r, diameter) * (1.0 + rel) + 1e-15
    return rc


def _diameter(x: Tensor, y: Tensor) -> float:
    lo = torch.minimum(x.min(0).values, y.min(0).values).double()
    hi = torch.maximum(x.max(0).values, y.max(0).values).double()
    return float((hi - lo).norm()) * (1 + 1e-9) + 1e-12


def _group_ptr(sorted_ids: Tensor, num_groups: int) -> Tensor:
    """CSR pointer ``(num_groups + 1,)`` of a sorted vector of ids in ``[0, num_groups)``."""
    return torch.searchsorted(sorted_ids, torch.arange(num_groups + 1, device=sorted_ids.device))


def _sorted_ranks(batch: Tensor) -> Tensor:
    """Dense graph ids ``0 .. B - 1`` ``(N,)`` of a sorted, non-empty ``batch``, by a cumsum of
    its boundaries."""
    ranks = torch.zeros(batch.numel(), dtype=torch.long, device=batch.device)
    ranks[1:] = torch.cumsum((batch[1:] != batch[:-1]).long(), 0)
    return ranks


@torch.no_grad()
def _search(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor], batch_y: Optional[Tensor],
            same: bool, loop: bool, k: Optional[int], backend: str, all_pairs: bool) -> Tensor:
    """Shared driver: dense graph ids, sort by graph, candidates, float64 decision, truncation."""
    device = x.device
    nx, ny, d = x.size(0), y.size(0), x.size(1)
    if nx == 0 or ny == 0 or k == 0:
        return _empty(device)

    # dense graph ids 0..B-1 shared by x and y, then a stable sort by graph
    perm_x: Optional[Tensor] = None  # None: already sorted (identity)
    perm_y: Optional[Tensor] = None
    if batch_x is None and batch_y is None:
        gx = torch.zeros(nx, dtype=torch.long, device=device)
        gy = gx if same else torch.zeros(ny, dtype=torch.long, device=device)
        num_graphs = 1
    elif same and bool((batch_x[1:] >= batch_x[:-1]).all()):
        gx = gy = _sorted_ranks(batch_x)
        num_graphs = int(gx[-1]) + 1
    else:
        if batch_x is None:
            batch_x = torch.zeros(nx, dtype=torch.long, device=device)
        if batch_y is None:
            batch_y = torch.zeros(ny, dtype=torch.long, device=device)
        ids, inv = torch.unique(torch.cat([batch_x, batch_y]), return_inverse=True)
        gx, gy = inv[:nx], inv[nx:]
        num_graphs = ids.numel()
        perm_x = torch.sort(gx, stable=True).indices
        perm_y = perm_x if same else torch.sort(gy, stable=True).indices
        gx, gy = gx[perm_x], gy[perm_y]
    xs = x if perm_x is None else x[perm_x]
    ys = xs if same else (y if perm_y is None else y[perm_y])

    if all_pairs:
        src, tgt = _all_pairs(gx, gy, num_graphs)
    else:
        sdt = _search_dtype(x.dtype)
        diameter = _diameter(x, y)
        if 4.0 * d * diameter * diameter > torch.finfo(sdt).max:  # squares would overflow
            sdt = torch.float64
        rc = _candidate_radius(r, sdt, d, diameter)
        if backend == "kdtree" and not math.isfinite((2.0 * rc + 1.0 + diameter) ** 2 * (d + 1)):
            backend = "cdist"  # extents near the float limits: the tree's distances would overflow
        fn = {"kdtree": _cand_kdtree, "torch_cluster": _cand_torch_cluster,
              "cdist": _cand_cdist}[backend]
        src, tgt = fn(xs.to(sdt), ys.to(sdt), gx, gy, num_graphs, rc, same)
    if same:
        # the candidate set is symmetric: decide each unordered pair once
        src, tgt = _masked(src < tgt, src, tgt)
    if perm_x is not None:
        src, tgt = perm_x[src], perm_y[tgt]

    d2 = None
    if not all_pairs or k is not None:
        d2 = _squared_distances(x, x if same else y, src, tgt)
    if not all_pairs:
        src, tgt, d2 = _masked(d2 <= r * r, src, tgt, d2)
    if same:
        parts_s, parts_t, parts_d = [src, tgt], [tgt, src], [d2, d2]
        if loop:
            ar = torch.arange(nx, device=device)
            parts_s.append(ar)
            parts_t.append(ar)
            parts_d.append(torch.zeros(nx, dtype=torch.float64, device=device))
        src, tgt = torch.cat(parts_s), torch.cat(parts_t)
        d2 = torch.cat(parts_d) if d2 is not None else None

    # canonical order (target, source)
    key = tgt * nx + src
    if k is None:  # sorting the keys alone is cheaper than sorting indices and gathering
        key = sort_keys(key)
        return torch.stack([key % nx, torch.div(key, nx, rounding_mode="floor")])
    order = argsort_keys(key)[1]
    src, tgt = src[order], tgt[order]
    if src.numel():
        d2 = d2[order]
        # nearest first, ties by source index: stable sorts on (d2) then (target)
        o = torch.sort(d2, stable=True).indices
        o = o[torch.sort(tgt[o], stable=True).indices]
        tgt_o = tgt[o]
        counts = torch.bincount(tgt_o, minlength=ny)
        start = torch.cumsum(counts, 0) - counts
        rank = torch.arange(o.numel(), device=device) - start[tgt_o]
        keep_sorted = o[rank < k]
        mask = torch.zeros(src.numel(), dtype=torch.bool, device=device)
        mask[keep_sorted] = True
        src, tgt = src[mask], tgt[mask]
    return torch.stack([src, tgt])


def _masked(keep: Tensor, *ts: Tensor) -> Tuple[Tensor, ...]:
    """``t[keep]`` for every ``t``, with one ``nonzero`` for all, and none where all are kept."""
    if bool(keep.all()):
        return ts
    idx = keep.nonzero().squeeze(1)
    return tuple(t.index_select(0, idx) for t in ts)


def _squared_distances(x: Tensor, y: Tensor, src: Tensor, tgt: Tensor) -> Tensor:
    """``|x_src - y_tgt|^2`` in float64, ``(E,)``; summed column by column (a reduction over a
    short last axis is several times slower than a few elementwise passes)."""
    d2 = torch.zeros(src.numel(), dtype=torch.float64, device=src.device)
    for c in range(x.size(1)):
        xc = x[:, c].double()
        yc = xc if y is x else y[:, c].double()
        diff = xc.index_select(0, src) - yc.index_select(0, tgt)
        d2.addcmul_(diff, diff)
    return d2


def _all_pairs(gxs: Tensor, gys: Tensor, num_graphs: int) -> Tuple[Tensor, Tensor]:
    """Every (source, target) pair in the same graph (indices into the sorted arrays)."""
    ptr_x = _group_ptr(gxs, num_graphs)
    size_x = ptr_x[1:] - ptr_x[:-1]
    per_target = size_x[gys]
    tgt = torch.repeat_interleave(torch.arange(gys.numel(), device=gys.device), per_target)
    start = torch.cumsum(per_target, 0) - per_target
    src = ptr_x[gys][tgt] + torch.arange(tgt.numel(), device=gys.device) - start[tgt]
    return src, tgt


# ---------------------------------------------------------- candidate steps
# Each returns (src, tgt) indices into the graph-sorted xs / ys: a superset of
# the same-graph pairs within rc (self pairs may or may not be present). For
# ``same`` the set must contain both orientations of a pair, or only src < tgt.

def _cand_kdtree(xs: Tensor, ys: Tensor, gxs: Tensor, gys: Tensor, num_graphs: int, rc: float,
                 same: bool) -> Tuple[Tensor, Tensor]:
    from scipy.spatial import cKDTree

    ptr_x = _group_ptr(gxs, num_graphs).tolist()
    ptr_y = ptr_x if same else _group_ptr(gys, num_graphs).tolist()
    X = xs.detach().double().numpy()
    Y = X if same else ys.detach().double().numpy()
    GX = gxs.numpy()
    GY = GX if same else gys.numpy()
    sep = 2.0 * rc + 1.0
    srcs, tgts = [], []

    def tree(P: np.ndarray, G: np.ndarray, g0: int, multi: bool):
        if multi:  # graphs apart along an extra axis; within a graph the offset cancels exactly
            P = np.concatenate([P, ((G - g0) * sep)[:, None]], axis=1)
        # measured: unbalanced, non-compact trees build and query faster here
        return cKDTree(P, balanced_tree=False, compact_nodes=False)

    g = 0
    while g < num_graphs:
        # one tree per large graph; consecutive small graphs share one tree
        h = g + 1
        while h < num_graphs and (ptr_x[h + 1] - ptr_x[g]) + (ptr_y[h + 1] - ptr_y[g]) <= KDTREE_GROUP:
            h += 1
        xa, xb, ya, yb = ptr_x[g], ptr_x[h], ptr_y[g], ptr_y[h]
        multi = h > g + 1
        if xb > xa and yb > ya:
            tx = tree(X[xa:xb], GX[xa:xb], g, multi)
            if same:  # each unordered pair once (i < j), which is all the driver needs
                pairs = tx.query_pairs(rc, output_type="ndarray").astype(np.int64)
                srcs.append(pairs[:, 0] + xa)
                tgts.append(pairs[:, 1] + xa)
            else:
                ty = tree(Y[ya:yb], GY[ya:yb], g, multi)
                m = tx.sparse_distance_matrix(ty, rc, output_type="ndarray")
                srcs.append(m["i"].astype(np.int64) + xa)
                tgts.append(m["j"].astype(np.int64) + ya)
        g = h
    if not srcs:
        z = torch.empty(0, dtype=torch.long)
        return z, z
    return torch.from_numpy(np.concatenate(srcs)), torch.from_numpy(np.concatenate(tgts))


def _cand_torch_cluster(xs: Tensor, ys: Tensor, gxs: Tensor, gys: Tensor, num_graphs: int,
                        rc: float, same: bool) -> Tuple[Tensor, Tensor]:
    import torch_cluster

    ptr_x = _group_ptr(gxs, num_graphs)
    max_x = int((ptr_x[1:] - ptr_x[:-1]).max())
    bound = min(max_x, _TC_START.get(xs.device.type, max_x))
    bx = gxs if num_graphs > 1 else None
    todo = None  # target indices still to search (None = all)
    srcs, tgts = [], []
    while True:
        yq = ys if todo is None else ys[todo]
        by = (gys if todo is None else gys[todo]) if num_graphs > 1 else None
        # torch-cluster returns (target, source) rows
        e = torch_cluster.radius(xs, yq, rc, bx, by, max_num_neighbors=bound,
                                 batch_size=num_graphs if num_graphs > 1 else None)
        t = e[0] if todo is None else todo[e[0]]
        if bound >= max_x:
            srcs.append(e[1]); tgts.append(t)
            break
        counts = torch.bincount(e[0], minlength=yq.size(0))
        full = counts >= bound
        done = ~full[e[0]]
        srcs.append(e[1][done]); tgts.append(t[done])
        if not bool(full.any()):
            break
        idx = full.nonzero().flatten()
        todo = idx if todo is None else todo[idx]
        bound = min(max_x, bound * 4)
    return torch.cat(srcs), torch.cat(tgts)


def _cand_cdist(xs: Tensor, ys: Tensor, gxs: Tensor, gys: Tensor, num_graphs: int, rc: float,
                same: bool) -> Tuple[Tensor, Tensor]:
    d = xs.size(1)
    eps = torch.finfo(xs.dtype).eps
    ptr_x = _group_ptr(gxs, num_graphs).tolist()
    ptr_y = _group_ptr(gys, num_graphs).tolist()
    x64, y64 = xs.double(), ys.double()
    srcs, tgts = [], []

    def block(xa: int, xb: int, ya: int, yb: int, mixed: bool) -> None:
        if xb <= xa or yb <= ya:
            return
        # centre in float64 so the matmul form of cdist loses little accuracy
        c = x64[xa:xb].mean(0)
        xc = (x64[xa:xb] - c).to(xs.dtype)
        yc = (y64[ya:yb] - c).to(xs.dtype)
        rx = float(xc.double().norm(dim=1).max())
        ry = float(yc.double().norm(dim=1).max())
        # rounding of the cast and of |x|^2 + |y|^2 - 2 x.y, with a factor 2 to spare
        r_eff = rc + 4 * eps * math.sqrt(d) * (rx + ry)
        thr = math.sqrt(r_eff * r_eff + 8 * (d + 2) * eps * (rx * rx + ry * ry))
        rows = max(1, CDIST_CHUNK_ELEMENTS // (xb - xa))
        for s in range(ya, yb, rows):
            e = min(yb, s + rows)
            hit = torch.cdist(yc[s - ya:e - ya], xc) <= thr
            if mixed:
                hit &= gys[s:e, None] == gxs[None, xa:xb]
            t, j = hit.nonzero(as_tuple=True)
            srcs.append(j + xa)
            tgts.append(t + s)

    # group consecutive small graphs into one block (masked by graph id)
    g = 0
    while g < num_graphs:
        h = g + 1
        while (h < num_graphs and (ptr_x[h + 1] - ptr_x[g]) * (ptr_y[h + 1] - ptr_y[g])
               <= CDIST_GROUP_ELEMENTS):
            h += 1
        block(ptr_x[g], ptr_x[h], ptr_y[g], ptr_y[h], mixed=h > g + 1)
        g = h
    if not srcs:
        z = torch.empty(0, dtype=torch.long, device=xs.device)
        return z, z
    return torch.cat(srcs), torch.cat(tgts)


# ------------------------------------------------------------------ public
def radius_graph(pos: Tensor, r: float, batch: Optional[Tensor] = None, loop: bool = False,
                 max_num_neighbors: Optional[int] = None, backend: str = "auto") -> Tensor:
    """All pairs ``(j, i)`` of points of the same graph with ``|pos_j - pos_i| <= r``.

    Args:
        pos: points ``(N, d)``, floating point, finite.
        r: radius, finite and ``>= 0``; the boundary is inclusive (decided in float64).
        batch: graph id per point ``(N,)``, any integers, need not be sorted;
            ``None`` means one graph.
        loop: include the self pairs ``(i, i)``. With ``loop=False`` only the
            index pair ``i == j`` is dropped; duplicate points still connect.
        max_num_neighbors: ``None`` for no truncation; else each target keeps
            its ``k`` nearest sources (ties by smaller source index).
        backend: ``"auto"``, ``"kdtree"``, ``"torch_cluster"`` or ``"cdist"``
            (see the module docstring for the ``"auto"`` rule).

    Returns:
        ``edge_index`` ``(2, E)`` int64 on ``pos.device``: row 0 source ``j``,
        row 1 target ``i``, sorted by ``(i, j)``.
    """
    _check_points(pos, "pos")
    r = _check_scalar(r, "r")
    batch = _check_batch(batch, pos.size(0), pos.device, "batch", "pos")
    k = _check_k(max_num_neighbors)
    if backend == "auto" and k is None:
        out = _native_radius_graph(pos, r, batch, bool(loop))
        if out is not None:
            return out
    be = resolve_backend(backend, pos.device)
    return _search(pos, pos, r, batch, batch, True, bool(loop), k, be, all_pairs=False)


def _native_radius_graph(pos: Tensor, r: float, batch: Optional[Tensor], loop: bool) -> Optional[Tensor]:
    """:func:`radius_graph` by the ``radius_graph`` operator of :mod:`pyg_lie.ops` (the native
    cell lists of ``_native/radius_graph.c``) where they apply: CPU with the native kernels
    built, 1 to 3 dimensions, ``batch`` sorted or ``None``, outside ``torch.compile``; else
    ``None`` (the k-d tree and the other backends then search)."""
    n, d = pos.shape
    if pos.device.type != "cpu" or not 1 <= d <= 3 or n == 0 or _is_compiling() or not native_available():
        return None
    if batch is None:
        ptr = torch.tensor([0, n])
    else:
        if bool((batch[1:] < batch[:-1]).any()):
            return None
        ranks = _sorted_ranks(batch)
        ptr = _group_ptr(ranks, int(ranks[-1]) + 1)
    return radius_graph_op(pos, ptr, r, loop)


def radius(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor] = None,
           batch_y: Optional[Tensor] = None, max_num_neighbors: Optional[int] = None,
           backend: str = "auto") -> Tensor:
    """Bipartite search: pairs ``(j, i)`` with ``|x_j - y_i| <= r`` and ``batch_x[j] == batch_y[i]``.

    Args:
        x: sources ``(N_x, d)``.
        y: targets ``(N_y, d)``, same ``d`` and device as ``x``.
        r: radius, finite and ``>= 0``, inclusive (decided in float64).
        batch_x: graph id per source ``(N_x,)`` or ``None`` (all graph 0).
        batch_y: graph id per target ``(N_y,)`` or ``None`` (all graph 0).
        max_num_neighbors: ``None`` for no truncation; else the ``k`` nearest
            sources per target (ties by smaller source index).
        backend: see :func:`radius_graph`.

    Returns:
        ``(2, E)`` int64: row 0 indexes ``x``, row 1 indexes ``y``, sorted by ``(i, j)``.
    """
    _check_points(x, "x")
    _check_points(y, "y")
    if y.size(1) != x.size(1):
        raise ValueError(f"y must have as many columns as x ({x.size(1)}), got shape {tuple(y.shape)}")
    if y.device != x.device:
        raise ValueError(f"y is on {y.device} but x is on {x.device}; move both to one device")
    r = _check_scalar(r, "r")
    batch_x = _check_batch(batch_x, x.size(0), x.device, "batch_x", "x")
    batch_y = _check_batch(batch_y, y.size(0), x.device, "batch_y", "y")
    k = _check_k(max_num_neighbors)
    be = resolve_backend(backend, x.device)
    dt = torch.promote_types(x.dtype, y.dtype)
    return _search(x.to(dt), y.to(dt), r, batch_x, batch_y, False, True, k, be, all_pairs=False)


def chord_radius(theta: float) -> float:
    """Chord length ``2 sin(theta / 2)`` of the geodesic distance ``theta`` on the unit sphere."""
    return 2.0 * math.sin(min(theta, math.pi) / 2.0)


def geodesic_radius_graph(pos: Tensor, theta: float, batch: Optional[Tensor] = None,
                          loop: bool = False, max_num_neighbors: Optional[int] = None,
                          backend: str = "auto") -> Tensor:
    """:func:`radius_graph` for unit vectors ``pos (N, 3)`` with geodesic distance ``<= theta``.

    Implemented as the chord radius ``2 sin(theta / 2)`` (float64, inclusive);
    ``theta >= pi`` returns every pair of the same graph. Truncation ranks by
    chord (equivalently geodesic) distance.

    Returns:
        ``(2, E)`` int64, row 0 source ``j``, row 1 target ``i``, sorted by ``(i, j)``.
    """
    _check_points(pos, "pos", dim=3)
    _check_unit(pos, "pos")
    theta = _check_scalar(theta, "theta")
    batch = _check_batch(batch, pos.size(0), pos.device, "batch", "pos")
    k = _check_k(max_num_neighbors)
    be = resolve_backend(backend, pos.device)
    return _search(pos, pos, chord_radius(theta), batch, batch, True, bool(loop), k, be,
                   all_pairs=theta >= math.pi)


def geodesic_radius(x: Tensor, y: Tensor, theta: float, batch_x: Optional[Tensor] = None,
                    batch_y: Optional[Tensor] = None, max_num_neighbors: Optional[int] = None,
                    backend: str = "auto") -> Tensor:
    """:func:`radius` for unit vectors ``x (N_x, 3)``, ``y (N_y, 3)`` with geodesic distance ``<= theta``.

    Used by the S^2 attention with ``theta = (1 + 1e-3) * theta_cutoff`` to
    match torch-harmonics. ``theta >= pi`` returns every pair of the same graph.

    Returns:
        ``(2, E)`` int64: row 0 indexes ``x``, row 1 indexes ``y``, sorted by ``(i, j)``.
    """
    _check_points(x, "x", dim=3)
    _check_points(y, "y", dim=3)
    if y.device != x.device:
        raise ValueError(f"y is on {y.device} but x is on {x.device}; move both to one device")
    _check_unit(x, "x")
    _check_unit(y, "y")
    theta = _check_scalar(theta, "theta")
    batch_x = _check_batch(batch_x, x.size(0), x.device, "batch_x", "x")
    batch_y = _check_batch(batch_y, y.size(0), x.device, "batch_y", "y")
    k = _check_k(max_num_neighbors)
    be = resolve_backend(backend, x.device)
    dt = torch.promote_types(x.dtype, y.dtype)
    return _search(x.to(dt), y.to(dt), chord_radius(theta), batch_x, batch_y, False, True, k, be,
                   all_pairs=theta >= math.pi)


# ----------------------------------------------------------------- k nearest neighbours
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
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise ValueError(f"k must be an int >= 0, got {k!r}")
    k = min(int(k), pos.size(0))  # the same graph: no point has more neighbours (and k stays an int64)
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


# ----------------------------------------------------------------- complete graphs
def _sorted_batch(batch: Tensor, N: int, name: str = "batch") -> Tensor:
    """``batch`` checked (one graph id >= 0 per node, sorted) as a plain int64 tensor."""
    checks.batch_vector(batch, N, "node")
    batch = checks.plain_index(name, batch)
    if N > 1 and not _is_compiling() and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError(f"{name} must be sorted (PyG convention: the nodes of a graph are contiguous); "
                         f"sort the nodes by {name} first")
    return batch


def complete_graph(batch: Optional[Tensor] = None, self_loops: bool = True, *,
                   num_nodes: Optional[int] = None) -> Tensor:
    r"""Every ordered pair ``j -> i`` of nodes of the same graph, ``(2, sum_b n_b^2)``.

    Args:
        batch: ``(N,)`` sorted graph id of every node (the PyG convention: the nodes of a
            graph are contiguous; ids may skip values), or ``None`` for one graph of
            ``num_nodes`` nodes.
        self_loops: include ``i -> i``.
        num_nodes: the number of nodes when ``batch`` is ``None``.

    Returns:
        ``(2, E)`` int64 on the device of ``batch``, row 0 the source ``j``, row 1 the target
        ``i``, sorted by ``(i, j)`` (the order of :func:`radius_graph`).
    """
    if batch is None:
        if num_nodes is None:
            raise ValueError("complete_graph needs batch (one graph id per node) or num_nodes (one graph)")
        N = nonnegative_int("num_nodes", num_nodes)
        checks.int64_size("the complete graph's edge count (num_nodes^2)", N * N)
        batch = torch.zeros(N, dtype=torch.long)
    else:
        if num_nodes is not None and (not isinstance(batch, Tensor) or batch.numel() != num_nodes):
            raise ValueError(f"num_nodes={num_nodes!r} but batch has "
                             f"{batch.numel() if isinstance(batch, Tensor) else type(batch).__name__} "
                             "entries; pass one of them")
        N = batch.numel() if isinstance(batch, Tensor) else 0
        batch = _sorted_batch(batch, N)
    if not isinstance(self_loops, bool):
        raise ValueError(f"self_loops must be True or False, got {self_loops!r}")
    device = batch.device
    if N == 0:
        return _empty(device)
    counts = torch.unique_consecutive(batch, return_counts=True)[1]
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # first node of every graph, and N
    ei = complete_edges(ptr)
    if not self_loops:
        ei = ei[:, ei[0] != ei[1]]
    return ei


# ----------------------------------------------------------------- log-metric graphs
def _log_norm(group: LieGroup, rel: Tensor, chart: str) -> Tensor:
    """``||vee(log(rel))||`` for relative poses ``rel (E, m, m)``, ``(E,)``; inf outside the chart."""
    w, valid = chart_safe_log(group, rel, chart, what="candidate pair")
    d = w.norm(dim=-1)
    if valid is not None:
        d = torch.where(valid, d, torch.full_like(d, math.inf))
    return d


def _pairwise_log_norm(group: LieGroup, g_dst: Tensor, g_src: Tensor, chart: str) -> Tensor:
    """``||log(g_i^-1 g_j)||`` for all pairs, ``(n_dst, n_src)``; inf outside the chart."""
    nd, ns = g_dst.shape[0], g_src.shape[0]
    rel = group.between(g_dst[:, None].expand(nd, ns, *g_dst.shape[1:]).reshape(-1, *g_dst.shape[1:]),
                        g_src[None].expand(nd, ns, *g_src.shape[1:]).reshape(-1, *g_src.shape[1:]))
    return _log_norm(group, rel, chart).view(nd, ns)


#: ``method`` values of :func:`log_knn_graph` / :func:`log_radius_graph`
GRAPH_METHODS = ("auto", "embedding", "brute")

#: ``method="auto"`` uses the embedding search when the longest sequence has at least
#: this many elements, on CPU (measured crossover ~100-200 elements on a small CPU)
#: and on other devices (the k-d tree runs on the CPU; the brute force is a dense
#: GPU kernel, untuned guess).
AUTO_EMBEDDING_MIN = {"cpu": 256}
AUTO_EMBEDDING_MIN_OTHER = 4096

#: pairs whose exact log is evaluated at once by the embedding search, per ``chunk``
_PAIRS_PER_CHUNK = 256


def log_knn_graph(group: Union[str, LieGroup], g: Tensor, k: int, batch: Optional[Tensor] = None,
                  self_loops: bool = True, chunk: int = 1024, chart: str = "mask",
                  method: str = "auto") -> Tensor:
    r"""k nearest neighbours in the log-norm metric ``d(g_i, g_j) = ||log(g_i^{-1} g_j)||``.

    ``d`` is invariant under the left action, so the graph is too. Each target
    ``i`` gets its ``k`` nearest sources (plus itself when ``self_loops``; fewer
    when its sequence is shorter or pairs are out of chart). The attention on the
    result costs ``O(N k)``.

    Construction (``method``):

    * ``"brute"``: all ``O(sum_b n_b^2)`` log-norms, in chunks of ``chunk``
      targets (memory ``O(chunk * n_b)``); any group, any chart.
    * ``"embedding"``: for groups with :meth:`~pyg_lie.groups.LieGroup.log_norm_embedding`
      (SO2, SE2, SO3, SE3, Tn), whose embedding ``e`` satisfies
      ``L ||e_i - e_j|| <= d(g_i, g_j) <= B(||e_i - e_j||) <= U ||e_i - e_j||``: a
      k-d tree (scipy, on the CPU) gives each target's ``k + 1`` embedding-nearest
      elements, whose ``k + 1``-th embedding distance ``x_i`` bounds the wanted
      ``k``-th log distance by ``B(x_i)``; every source with
      ``||e_i - e_j|| <= B(x_i) / L`` (plus a rounding slack) is a candidate, exact
      logs are evaluated on the candidates only (blocks of ``chunk * 256`` pairs)
      and each target keeps its nearest. Near-linear in ``N``; the edge set is the
      brute force's, except that ties in ``d`` (equal distances) may be broken
      differently (here: by the smaller source index). Assumes exact group
      elements (orthonormal rotation parts up to rounding).
    * ``"auto"`` (default): ``"embedding"`` when the group has an embedding, scipy
      imports and the longest sequence has at least ``AUTO_EMBEDDING_MIN["cpu"]``
      (CPU tensors) or ``AUTO_EMBEDDING_MIN_OTHER`` (other devices) elements; else
      ``"brute"``.

    Args:
        group: group or its name.
        g: ``(N, m, m)`` elements, nodes of a sequence contiguous.
        k: neighbours per target (excluding the self loop).
        batch: ``(N,)`` sorted sequence index, or ``None`` (one sequence).
        self_loops: add ``i -> i`` (counted apart from the ``k``).
        chunk: work-block size (see ``method``).
        chart: out-of-chart handling (affine groups, see
            :func:`~pyg_lie.groups.base.chart_safe_log`); such pairs are never edges.
        method: ``"auto"``, ``"embedding"`` or ``"brute"``.

    Returns:
        ``(2, E)`` edge index on ``g.device``, row 0 = source ``j``, row 1 = target
        ``i``; grouped by target, nearest first.
    """
    group = get_group(group)
    k = positive_int("k", k)
    if isinstance(g, Tensor) and g.dim() == 3:
        k = min(k, max(g.shape[0], 1))  # the same graph: no element has more neighbours
    return _log_graph(group, g, batch, self_loops, chunk, chart, k=k, r=None, method=method)


def _check_log_graph_args(group: LieGroup, g: Tensor, self_loops, chunk) -> int:
    """The arguments :func:`log_knn_graph` and :func:`log_radius_graph` share: ``g`` one finite
    ``(N, m, m)`` matrix of ``group`` per element, ``self_loops`` a bool, ``chunk`` a positive
    int (returned)."""
    if not isinstance(g, Tensor) or not g.is_floating_point():
        raise ValueError(f"g must be a floating-point tensor of {group.name} elements, got "
                         f"{g.dtype if isinstance(g, Tensor) else type(g).__name__}")
    checks.group_elements(group, g, g.shape[0] if g.dim() == 3 else -1)
    if g.numel() and not _is_compiling() and not bool(torch.isfinite(g).all()):
        raise ValueError("g contains NaN or infinite entries; every element must be a finite matrix")
    if not isinstance(self_loops, bool):
        raise ValueError(f"self_loops must be True or False, got {self_loops!r}")
    return positive_int("chunk", chunk)


def log_radius_graph(group: Union[str, LieGroup], g: Tensor, r: float, batch: Optional[Tensor] = None,
                     self_loops: bool = True, chunk: int = 1024, chart: str = "mask",
                     method: str = "auto") -> Tensor:
    r"""All pairs with ``||log(g_i^{-1} g_j)|| <= r`` within each sequence.

    ``method="embedding"`` searches the candidates ``||e_i - e_j|| <= r / L`` (plus
    a rounding slack) with :func:`pyg_lie.neighbors.radius_graph` (k-d tree on the
    CPU) and evaluates exact logs on them only; ``"brute"`` evaluates all pairs;
    ``"auto"`` as in :func:`log_knn_graph`, whose arguments these are. Both give
    the same edge set.

    Returns:
        ``(2, E)`` edge index on ``g.device``, row 0 = source ``j``, row 1 = target
        ``i``, sorted by ``(i, j)``.
    """
    group = get_group(group)
    r = checks.positive_float("r", r.item() if isinstance(r, Tensor) and r.numel() == 1 else r)
    return _log_graph(group, g, batch, self_loops, chunk, chart, k=None, r=r, method=method)


def _resolve_method(method: str, group: LieGroup, g: Tensor, n_max: int) -> Optional[LogNormEmbedding]:
    """The embedding to search with, or ``None`` for the brute force."""
    if method not in GRAPH_METHODS:
        raise ValueError(f"method must be one of {GRAPH_METHODS}, got {method!r}")
    if method == "brute" or g.shape[0] == 0:
        return None
    if method == "auto":
        threshold = AUTO_EMBEDDING_MIN.get(g.device.type, AUTO_EMBEDDING_MIN_OTHER)
        if n_max < threshold or not _scipy_available():
            return None
    lne = group.log_norm_embedding(g)
    if lne is None and method == "embedding":
        raise ValueError(f"method='embedding': {group.name} has no log_norm_embedding; use 'brute' or 'auto'")
    if lne is not None and method == "embedding" and not _scipy_available():
        raise ValueError("method='embedding' needs scipy (scipy.spatial.cKDTree); use 'brute'")
    return lne


@torch.no_grad()
def _log_graph(group: LieGroup, g: Tensor, batch: Optional[Tensor], self_loops: bool, chunk: int,
               chart: str, k: Optional[int], r: Optional[float], method: str = "auto") -> Tensor:
    chunk = _check_log_graph_args(group, g, self_loops, chunk)
    N = g.shape[0]
    batch = torch.zeros(N, dtype=torch.long, device=g.device) if batch is None else _sorted_batch(batch, N)
    if N:  # dense ids 0 .. B - 1: the cost follows the number of elements, not the largest id
        batch = torch.unique_consecutive(batch, return_inverse=True)[1]
    counts = torch.bincount(batch) if N else batch.new_zeros(0)
    lne = _resolve_method(method, group, g, int(counts.max()) if N else 0)
    if lne is not None and N:
        e = lne.embedding.detach().double()
        if not math.isfinite(float((e.max(0).values - e.min(0).values).norm()) ** 2 * (e.shape[1] + 2)):
            lne = None  # extents near the float limits: the tree's distances would overflow; all pairs
    if lne is not None:
        if k is not None:
            return _embedding_knn(group, g, lne, batch, counts, k, self_loops, chunk, chart)
        return _embedding_radius(group, g, lne, batch, r, self_loops, chunk, chart)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).tolist()
    srcs, dsts = [], []
    for b in range(len(ptr) - 1):
        s, e = ptr[b], ptr[b + 1]
        for c in range(s, e, chunk):
            ce = min(c + chunk, e)
            d = _pairwise_log_norm(group, g[c:ce], g[s:e], chart)  # (ce - c, n_b)
            rows = torch.arange(c, ce, device=g.device)
            if not self_loops:
                d[torch.arange(ce - c), rows - s] = math.inf
            if k is not None:
                kk = min(k + int(self_loops), e - s)
                val, idx = d.topk(kk, dim=1, largest=False)
                keep = torch.isfinite(val)
                src = idx + s
                dst = rows[:, None].expand_as(idx)
                srcs.append(src[keep]); dsts.append(dst[keep])
            else:
                ii, jj = (d <= r).nonzero(as_tuple=True)
                srcs.append(jj + s); dsts.append(rows[ii])
    if not srcs:
        return torch.empty(2, 0, dtype=torch.long, device=g.device)
    return torch.stack([torch.cat(srcs), torch.cat(dsts)])


def _edge_log_norm(group: LieGroup, g: Tensor, src: Tensor, dst: Tensor, chunk: int, chart: str) -> Tensor:
    """``||log(g_dst^-1 g_src)||`` per pair ``(E,)`` in blocks; inf outside the chart."""
    out = []
    block = max(1, chunk) * _PAIRS_PER_CHUNK
    for a in range(0, src.numel(), block):
        s, t = src[a:a + block], dst[a:a + block]
        out.append(_log_norm(group, group.between(g[t], g[s]), chart))
    return torch.cat(out) if out else g.new_zeros(0)


def _slack(e: Tensor) -> float:
    """Absolute rounding slack of log-norms and embedding distances for ``e (N, D)``."""
    eps = torch.finfo(e.dtype).eps if e.dtype.is_floating_point else torch.finfo(torch.float32).eps
    return 256.0 * eps * (1.0 + (float(e.abs().max()) if e.numel() else 0.0))


def _embedding_radius(group: LieGroup, g: Tensor, lne: LogNormEmbedding, batch: Tensor, r: float,
                      self_loops: bool, chunk: int, chart: str) -> Tensor:
    """Radius graph: candidates ``||e_i - e_j|| <= (r + tol) / L + tol``, then exact logs."""
    e = lne.embedding.detach()
    tol = _slack(e)
    rc = (r + tol) / lne.lower + tol
    ei = radius_graph(e.to("cpu", torch.float64), rc, batch.cpu(), loop=self_loops, backend="kdtree")
    ei = ei.to(g.device)
    d = _edge_log_norm(group, g, ei[0], ei[1], chunk, chart)
    return ei[:, d <= r]


def _embedding_knn(group: LieGroup, g: Tensor, lne: LogNormEmbedding, batch: Tensor, counts: Tensor,
                   k: int, self_loops: bool, chunk: int, chart: str) -> Tensor:
    """kNN graph from per-target candidate radii (see :func:`log_knn_graph`)."""
    from scipy.spatial import cKDTree

    N = g.shape[0]
    e = lne.embedding.detach()
    tol = _slack(e)
    E = e.to("cpu", torch.float64).numpy()
    bcpu = batch.cpu()
    n_node = counts.cpu()[bcpu].numpy()  # (N,) sequence length of each node
    # m = min(k + 1, n_b) embedding-nearest (self included) contain >= q admissible
    # sources, q = the number the brute force keeps; their bound caps the q-th distance
    m = np.minimum(k + 1, n_node)
    diam = float(np.linalg.norm(E.max(0) - E.min(0)))
    r_max = (float(lne.upper_bound(torch.tensor(diam + tol, dtype=torch.float64))) + 2 * tol) / lne.lower + tol
    if counts.numel() > 1:  # sequences apart along an extra axis, farther than any search radius
        sep = 2.0 * r_max + diam + 1.0
        E = np.concatenate([E, (bcpu.numpy().astype(np.float64) * sep)[:, None]], axis=1)
    tree = cKDTree(E, balanced_tree=False, compact_nodes=False)
    kq = int(m.max())
    dist, _ = tree.query(E, k=kq)
    dist = dist.reshape(N, kq)
    x = dist[np.arange(N), m - 1]  # within the own sequence: it has >= m points, all nearer than sep
    bound = lne.upper_bound(torch.from_numpy(x + tol)).numpy()
    rad = np.minimum((bound + 2 * tol) / lne.lower + tol, r_max)
    cand = tree.query_ball_point(E, rad)
    lens = np.fromiter((len(c) for c in cand), dtype=np.int64, count=N)
    src = np.fromiter(itertools.chain.from_iterable(cand), dtype=np.int64, count=int(lens.sum()))
    dst = np.repeat(np.arange(N, dtype=np.int64), lens)
    if not self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    src_t = torch.from_numpy(src).to(g.device)
    dst_t = torch.from_numpy(dst).to(g.device)
    d = _edge_log_norm(group, g, src_t, dst_t, chunk, chart)
    # segment top-q: order by (target, d), ties by source index (candidates are sorted by it)
    o = torch.sort(d, stable=True).indices
    o = o[torch.sort(dst_t[o], stable=True).indices]
    dst_o = dst_t[o]
    per = torch.bincount(dst_o, minlength=N)
    rank = torch.arange(o.numel(), device=g.device) - (per.cumsum(0) - per)[dst_o]
    q = torch.clamp(counts[batch] - 1, max=k) + int(self_loops)  # (N,) what the brute force keeps
    o = o[(rank < q[dst_o]) & torch.isfinite(d[o])]
    return torch.stack([src_t[o], dst_t[o]])


