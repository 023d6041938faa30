"""Log-metric graphs of group elements: k nearest neighbours and radius graphs in the
invariant metric ``||log(g_i^{-1} g_j)||``."""
from __future__ import annotations

import itertools
import math
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from .. import _checks as checks
from .._checks import positive_int
from .._tracing import tracing
from ..groups import LieGroup, get_group
from ..groups.base import LogNormEmbedding, chart_safe_log
from ._search import _scipy_available
from .complete import _sorted_batch
from .radius_graphs import radius_graph

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
#: this many elements, on CPU (above the size where the two methods cost the same)
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
    if g.numel() and not tracing() and not bool(torch.isfinite(g).all()):
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
