"""The search shared by the graphs of :mod:`pyg_lie.neighbors`: backends and their
resolution, argument checks, the driver (dense graph ids, candidates, the float64 decision,
truncation) and the candidate step of each backend."""
from __future__ import annotations

import functools
import math
import numbers
from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .. import _checks as checks
from ..ops import argsort_keys, sort_keys

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
    if isinstance(r, Tensor) and r.numel() == 1:
        r = r.item()
    if isinstance(r, bool) or not isinstance(r, (numbers.Real, Tensor)):  # no flags, no strings
        raise ValueError(f"{name} must be a real number, got {type(r).__name__}")
    return checks.nonnegative_float(name, r)


def _check_batch(batch: Optional[Tensor], n: int, device: torch.device, name: str,
                 pos_name: str) -> Optional[Tensor]:
    """``batch`` (any integer graph ids, one per row of ``pos_name``) as int64, or ``None``."""
    if batch is None:
        return None
    checks.graph_ids(name, batch, n, f"row of {pos_name}")
    if batch.device != device:
        raise ValueError(f"{name} is on {batch.device} but {pos_name} is on {device}; "
                         f"move it with {name}.to({pos_name}.device)")
    return batch.long()


def _check_k(k) -> Optional[int]:
    """``max_num_neighbors``: ``None`` (no truncation) or an int ``>= 0``."""
    if k is None:
        return None
    return min(checks.nonnegative_int("max_num_neighbors", k), 1 << 62)  # beyond any point count; int64-safe


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
    short last axis is slower than a few elementwise passes)."""
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
        # unbalanced, non-compact trees build and query faster on these point sets
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
