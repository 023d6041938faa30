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
"""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.utils import scatter, softmax

from .._batch import num_graphs as count_graphs
from .. import _checks as checks
from .._checks import positive_int
from ..groups import LieGroup, get_group
from ..groups.base import LogNormEmbedding, _is_compiling
from ..nn.attention_core import edge_attention
from ..neighbors import _scipy_available, radius_graph
from ..nn.lie_algebra_attention import LieAlgebraAttention, chart_safe_log, relative_log

__all__ = ["LieAlgebraTransformer", "VectorTokenTransformer", "VectorTokenAttention",
           "LieAlgebraOutput", "complete_graph", "log_knn_graph", "log_radius_graph", "GRAPH_METHODS",
           "pose_error", "equivariance_error", "completion_loss", "build_model"]


# ----------------------------------------------------------------- graphs
def _check_batch(batch: Tensor, N: int) -> Tensor:
    checks.batch_vector(batch, N, "token")
    if N > 1 and not _is_compiling() and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("batch must be sorted (PyG convention: nodes of a graph are contiguous); "
                         "sort the nodes by batch first")
    return batch.long()


def complete_graph(batch: Tensor, self_loops: bool = True) -> Tensor:
    r"""All ordered pairs ``j -> i`` within each sequence, ``(2, sum_b n_b^2)``.

    Args:
        batch: ``(N,)`` sorted graph index of each node.
        self_loops: include ``i -> i`` (``w_ii = 0``).
    """
    N = batch.numel()
    batch = _check_batch(batch, N)
    if N == 0:
        return torch.empty(2, 0, dtype=torch.long, device=batch.device)
    counts = torch.bincount(batch)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    deg = counts[batch]  # (N,)
    dst = torch.repeat_interleave(torch.arange(N, device=batch.device), deg)
    start = torch.repeat_interleave(deg.cumsum(0) - deg, deg)
    src = ptr[batch[dst]] + torch.arange(dst.numel(), device=batch.device) - start
    ei = torch.stack([src, dst])
    if not self_loops:
        ei = ei[:, ei[0] != ei[1]]
    return ei


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
            :func:`~pyg_lie.nn.lie_algebra_attention.chart_safe_log`); such pairs are never edges.
        method: ``"auto"``, ``"embedding"`` or ``"brute"``.

    Returns:
        ``(2, E)`` edge index on ``g.device``, row 0 = source ``j``, row 1 = target
        ``i``; grouped by target, nearest first.
    """
    group = get_group(group)
    k = positive_int("k", k)
    return _log_graph(group, g, batch, self_loops, chunk, chart, k=k, r=None, method=method)


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
    if not r > 0:
        raise ValueError(f"r must be positive, got {r!r}")
    return _log_graph(group, g, batch, self_loops, chunk, chart, k=None, r=float(r), method=method)


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
    N = g.shape[0]
    batch = torch.zeros(N, dtype=torch.long, device=g.device) if batch is None else _check_batch(batch, N)
    counts = torch.bincount(batch) if N else batch.new_zeros(0)
    lne = _resolve_method(method, group, g, int(counts.max()) if N else 0)
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
            positive_int(name, v)
        if hidden_channels % heads:
            raise ValueError(f"hidden_channels ({hidden_channels}) must be divisible by heads ({heads})")
        if in_channels < 0:
            raise ValueError(f"in_channels must be >= 0 (0: no node feature), got {in_channels}")
        if k is not None and (not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be None (complete graph) or a positive int, got {k!r}")
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
        batch = _check_batch(batch, N)
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
        if not _is_compiling() and N and bool((torch.bincount(batch) < 2).any()):
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
            self.attn.append(LieAlgebraAttention(hidden_channels, hidden_channels // heads, self.group,
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
        return self.attn[layer](h, edge_index, g, w=w, valid=valid)

    def num_score_parameters(self) -> int:
        return sum(a.num_score_parameters() for a in self.attn)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(group={self.group.name}, hidden={self.hidden_channels}, "
                f"layers={self.num_layers}, heads={self.heads}, score={self.score})")


class VectorTokenAttention(MessagePassing):
    r"""Scaled dot-product attention on vector tokens (the paper's baseline A).

    ``alpha_ij^h = softmax_j (q_i^h . k_j^h / sqrt(C))``, ``out_i^h = sum_j alpha_ij^h v_j^h``
    with ``q, k, v`` linear in ``h``. Shapes: ``h (N, in)`` -> ``(N, heads * out_channels)``.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, dropout: float = 0.0) -> None:
        super().__init__(node_dim=0, aggr="add")
        self.in_channels, self.out_channels, self.heads, self.dropout = in_channels, out_channels, heads, dropout
        self.lin_q = nn.Linear(in_channels, heads * out_channels)
        self.lin_k = nn.Linear(in_channels, heads * out_channels)
        self.lin_v = nn.Linear(in_channels, heads * out_channels)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for lin in (self.lin_q, self.lin_k, self.lin_v):
            lin.reset_parameters()

    def forward(self, h: Tensor, edge_index: Tensor, return_attention_weights: Optional[bool] = None):
        H, C = self.heads, self.out_channels
        q = self.lin_q(h).view(-1, H, C)
        k = self.lin_k(h).view(-1, H, C)
        v = self.lin_v(h).view(-1, H, C)
        src, dst = edge_index[0], edge_index[1]
        s = (q[dst] * k[src]).sum(-1) / math.sqrt(C)
        alpha = edge_attention(s, dst, num_nodes=h.shape[0])
        out = self.propagate(edge_index, v=v, alpha=F.dropout(alpha, self.dropout, self.training))
        out = out.reshape(-1, H * C)
        return (out, (edge_index, alpha)) if return_attention_weights else out

    def message(self, v_j: Tensor, alpha: Tensor) -> Tensor:
        return v_j * alpha.unsqueeze(-1)

    def num_score_parameters(self) -> int:
        return sum(p.numel() for p in (*self.lin_q.parameters(), *self.lin_k.parameters()))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


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
            self.attn.append(VectorTokenAttention(hidden_channels, hidden_channels // heads, heads, dropout))
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


# ----------------------------------------------------------------- metrics
def pose_error(group: Union[str, LieGroup], pred: Tensor, target: Tensor) -> Tensor:
    r"""Log-norm distance ``||vee(log(target^{-1} pred))||``, ``(B,)``.

    Outside the chart (affine groups only) the log does not exist; there the
    Frobenius distance ``||target^{-1} pred - I||_F`` is returned instead (it
    agrees with the log-norm to first order) -- never NaN.
    """
    group = get_group(group)
    rel = group.between(target, pred.to(target.dtype))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        w, valid = chart_safe_log(group, rel, "mask", what="prediction")
    d = w.norm(dim=-1)
    if valid is not None:
        eye = torch.eye(group.matrix_size, dtype=rel.dtype, device=rel.device)
        d = torch.where(valid, d, (rel - eye).flatten(1).norm(dim=-1))
    return d


def completion_loss(group: Union[str, LieGroup], out: LieAlgebraOutput, g: Tensor, target: Tensor,
                    batch: Tensor, aux_weight: float = 1.0) -> Tensor:
    r"""Invariant training loss for sequence completion.

    ``mean_b ||target_b^{-1} pred_b - I||_F^2`` (defined everywhere, locally the
    squared log-norm) plus ``aux_weight * mean_i ||delta_i - log(g_i^{-1} target)||^2``:
    every token is taught to locate the missing element relative to itself (the
    per-token targets are in the chart by construction of the data). With the pair
    head, also ``aux_weight * mean_b sum_e beta_e ||target^{-1} p_e - I||_F^2`` over
    the pair proposals ``p_e`` and their selection weights ``beta_e``.
    """
    group = get_group(group)
    dtype = out.prediction.dtype
    target = target.to(dtype)
    eye = torch.eye(group.matrix_size, dtype=dtype, device=target.device)
    pooled = (group.between(target, out.prediction) - eye).flatten(1).pow(2).sum(-1).mean()
    if aux_weight == 0:
        return pooled
    with torch.no_grad():
        wt, valid = chart_safe_log(group, group.between(g.to(dtype), target[batch]), "mask",
                                   what="token-to-target pose")
    err = (out.delta - wt).pow(2).sum(-1)
    if valid is not None:
        err = err * valid.to(dtype)
    loss = pooled + aux_weight * err.mean()
    if out.pair_weight is not None:
        # expected pair-proposal error under the selection weights (mixture of experts):
        # sharpens the selection towards pairs whose proposal is right
        pb = batch[out.pair_index[1]]
        perr = (group.between(target[pb], out.pair_g) - eye).flatten(1).pow(2).sum(-1)
        loss = loss + aux_weight * scatter(out.pair_weight * perr, pb, dim=0,
                                           dim_size=target.shape[0], reduce="sum").mean()
    return loss


@torch.no_grad()
def equivariance_error(model: _TokenTransformer, g: Tensor, batch: Optional[Tensor] = None,
                       a: Optional[Tensor] = None, generator: Optional[torch.Generator] = None) -> Tensor:
    r"""``||log((a pred(g))^{-1} pred(a g))||`` per sequence, ``(B,)``, one random ``a`` per sequence.

    Evaluated in the dtype of ``model`` (use ``model.double()`` for float64).
    """
    group = model.group
    dtype = model.token.dtype
    g = g.to(dtype)
    N = g.shape[0]
    if batch is None:
        batch = torch.zeros(N, dtype=torch.long, device=g.device)
    B = int(batch.max()) + 1
    if a is None:
        a = group.random(B, generator=generator, dtype=dtype, device=g.device)
    a = a.to(dtype)
    p1 = model(g, batch=batch).prediction
    p2 = model(group.compose(a[batch], g), batch=batch).prediction
    return pose_error(group, p2, group.compose(a, p1))
