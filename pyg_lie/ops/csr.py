r"""The CSR structure of a graph and the attention steps on it.

:class:`CSRStructure` holds the edges of a graph sorted by ``(target, source)``, their row
pointer and, built when a gradient first needs it, the transposed pattern. Every function here
takes one and chooses its kernel itself:

* :func:`csr_scores`, :func:`csr_aggregate`: the products ``q_i . k_j`` and
  ``sum_{j -> i} w_{h,e} v_j`` (batched matrix products on complete clouds, else the
  operators :func:`~pyg_lie.ops.sddmm` / :func:`~pyg_lie.ops.spmm`);
  :func:`csr_sddmm`, :func:`csr_spmm`: the operators themselves on the structure;
* :func:`csr_softmax`: the softmax of ``(H, E)`` scores over each target's incoming edges (a
  dense softmax where every target has the same in-degree, else the segment softmax);
* :func:`csr_softmax_attention`: softmax attention, fused where a kernel takes the inputs (the
  operator :func:`~pyg_lie.ops.csr_attention`), else the three steps above;
* :func:`to_edge_order`: per-edge rows from the sorted order back to the given one.

Which kernel runs follows the device and :func:`~pyg_lie.ops.set_backend` (see
:mod:`pyg_lie.ops._backend`); the layers never choose.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _checks as checks
from .._tracing import tracing
from . import _backend
from .attention import csr_attention
from .graph import argsort_keys, csr_scan, csr_transpose, degree_and_complete
from .sparse import _sddmm_op, _spmm_op, dense_softmax, segment_softmax

__all__ = ["CSRStructure", "csr_sddmm", "csr_spmm", "csr_scores", "csr_aggregate", "csr_softmax",
           "csr_softmax_attention", "to_edge_order"]

#: ``(crow, col, crow_t, col_t, perm_t, iperm_t)``: a CSR pattern, the CSR of its transpose
#: and the permutations between the two edge orders (``None`` where no gradient needs them)
Parts = Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Optional[Tensor]]


def _row_pointer(sorted_rows: Tensor, num_nodes: int) -> Tensor:
    """CSR row pointer ``(num_nodes + 1,)`` of non-decreasing row indices (no data-dependent
    shape, so it traces under ``torch.compile``)."""
    return torch.searchsorted(sorted_rows, torch.arange(num_nodes + 1, device=sorted_rows.device))


@dataclass
class CSRStructure:
    """Edges sorted by ``(dst, src)`` plus the transposed ordering.

    Attributes:
        perm: ``(E,)`` sorted position -> original edge id (``None``: already sorted).
        row, col: ``(E,)`` destination and source of every sorted edge.
        crow: ``(N + 1,)`` CSR row pointer over destinations.
        perm_t: ``(E,)`` order of the sorted edges by ``(src, dst)``; ``iperm_t`` its inverse.
        crow_t, col_t: CSR of the transpose (rows = sources, cols = destinations).
            These four are built on first use by a gradient (the batched path of
            complete clouds never needs them, and their sort is the costliest step).
        num_nodes: ``N``.
        degree: the common in-degree ``K`` when every node has ``K >= 1`` incoming
            edges (complete or kNN graphs), else 0; then the sorted edges of node
            ``i`` are rows ``i K .. (i + 1) K - 1`` and per-node reductions are dense.
        complete: True when, moreover, the nodes form consecutive blocks of ``K`` and
            every node's sources are exactly its block (all pairs within equal-size
            clouds, self-pairs included): the sorted scores are then the ``(B, K, K)``
            blocks of a batched matrix, and SDDMM / SpMM are batched matrix products.
            Built under ``torch.compile``, ``degree`` and ``complete`` stay 0 / False
            (their tests depend on the data); pass a structure built outside instead.
        checked: True for structures of :meth:`build`; a structure made directly has its
            indices and pointer checked once when made (``ValueError`` if ``row`` or ``col``
            leave ``[0, num_nodes)`` or ``crow`` is not a pointer of the edges).
        num_sources: for a bipartite graph (PyG's ``size=(N_src, N_dst)``), the number of
            sources ``N_src``: ``col`` indexes ``N_src`` source nodes while ``row``, ``crow``
            and ``num_nodes`` are the ``N_dst`` targets; the transposed pattern then has
            ``N_src`` rows. ``None`` (default): sources and targets are the same ``N`` nodes.
            A bipartite structure is never ``complete``.
    """

    perm: "Tensor | None"
    row: Tensor
    col: Tensor
    crow: Tensor
    num_nodes: int
    degree: int = 0
    complete: bool = False
    perm_t: "Tensor | None" = None
    crow_t: "Tensor | None" = None
    col_t: "Tensor | None" = None
    iperm_t: "Tensor | None" = None
    checked: bool = field(default=False, repr=False, compare=False)
    num_sources: Optional[int] = None

    @property
    def num_src(self) -> int:
        """The number of source nodes (``num_nodes`` unless the structure is bipartite)."""
        return self.num_nodes if self.num_sources is None else self.num_sources

    def __post_init__(self) -> None:
        if self.checked or tracing():
            return
        E = self.col.numel()
        if self.num_sources is not None:
            self.num_sources = checks.nonnegative_int("num_sources", self.num_sources)
            self.complete = False
        self.row = checks.index_tensor("row", self.row, self.num_nodes)
        self.col = checks.index_tensor("col", self.col, self.num_src)
        self.crow = checks.pointer("crow (the CSR row pointer)", self.crow, E, self.num_nodes)
        if self.row.shape != (E,) or self.col.shape != (E,) or (self.perm is not None and self.perm.shape != (E,)):
            raise ValueError(f"row, col and perm must have one entry per edge ({E})")
        if self.perm is not None:
            self.perm = checks.index_tensor("perm", self.perm, E, "edge")
        self.checked = True

    def check(self, num_nodes: int, num_edges: int, num_sources: Optional[int] = None) -> None:
        """``ValueError`` naming ``csr`` unless this structure has ``num_nodes`` nodes (targets)
        and ``num_edges`` edges, and with ``num_sources`` that many sources (O(1): for a
        structure passed along with ``edge_index``; left out under ``torch.compile``, where
        sizes are symbols)."""
        if tracing():
            return
        if self.num_nodes != num_nodes or self.col.numel() != num_edges:
            raise ValueError(f"csr: the CSRStructure has {self.num_nodes} nodes and {self.col.numel()} edges but "
                             f"the input {num_nodes} nodes and {num_edges} edges; pass "
                             f"csr=CSRStructure.build(edge_index, num_nodes) of these edges")
        if num_sources is not None and self.num_src != num_sources:
            raise ValueError(f"csr: the CSRStructure has {self.num_src} sources but the input {num_sources}; pass "
                             f"csr=CSRStructure.build(edge_index, num_dst, num_sources=num_src) of these edges")

    @classmethod
    def build(cls, edge_index: Tensor, num_nodes: int, transpose: bool = False,
              num_sources: Optional[int] = None) -> "CSRStructure":
        """Sort ``edge_index (2, E)`` by target; ``transpose=True`` also builds the transposed
        pattern that gradients need (unless the structure is complete), so that blocks
        compiled on their own do not rebuild it on every call. For a bipartite graph pass the
        ``num_nodes = N_dst`` targets and the ``num_sources = N_src`` sources (PyG's
        ``size=(N_src, N_dst)``); ``None`` or ``num_sources == num_nodes`` is the square case.

        ``edge_index`` may be any integer tensor (it is read as int64; PyG's ``EdgeIndex`` is
        copied into a plain tensor). ``ValueError`` naming ``edge_index`` if an index lies
        outside ``[0, num_nodes)``: checked while scanning sorted edges, else by one
        ``aminmax`` (left out under ``torch.compile``)."""
        # under a fake mode and for meta tensors, no data-dependent steps either
        compiling = tracing() or edge_index.device.type == "meta"
        if not compiling:
            num_nodes = checks.nonnegative_int("num_nodes", num_nodes)
        checks.edge_index(edge_index)
        edge_index = checks.plain_index("edge_index", edge_index)
        if num_sources is not None and num_sources != num_nodes:
            return cls._build_bipartite(edge_index, num_nodes, num_sources, transpose, compiling)
        src, dst = edge_index[0], edge_index[1]
        # edges sorted and in range: one pass (degree and complete depend on the data: not traced)
        scanned = None if compiling else csr_scan(src, dst, num_nodes)
        perm = None
        if scanned is None:
            checks.index_range("edge_index", edge_index, num_nodes)
            key = dst * num_nodes + src  # int64: no overflow for num_nodes < 2^31
            if compiling or (key.numel() > 1 and bool((key[1:] < key[:-1]).any())):
                perm = argsort_keys(key)[1]
                src, dst = src.index_select(0, perm), dst.index_select(0, perm)
            crow = _row_pointer(dst, num_nodes)
            if compiling:
                return cls(perm, dst, src, crow, num_nodes, checked=True)  # the transpose: built where needed
            scanned = (crow, *degree_and_complete(crow, src, dst, num_nodes))
        crow, degree, complete = scanned
        out = cls(perm, dst, src, crow, num_nodes, degree, complete, checked=True)
        if transpose and not complete:
            out.parts(True)
        return out

    @classmethod
    def _build_bipartite(cls, edge_index: Tensor, num_dst: int, num_src: int, transpose: bool,
                         compiling: bool) -> "CSRStructure":
        """:meth:`build` of edges from ``num_src`` sources to ``num_dst`` targets."""
        if not compiling:
            num_src = checks.nonnegative_int("num_sources", num_src)
            checks.index_range("edge_index[0]", edge_index[0], num_src, "source")
            checks.index_range("edge_index[1]", edge_index[1], num_dst, "target")
        src, dst = edge_index[0], edge_index[1]
        key = dst * num_src + src  # int64: no overflow for sizes < 2^31
        perm = None
        if compiling or (key.numel() > 1 and bool((key[1:] < key[:-1]).any())):
            perm = argsort_keys(key)[1]
            src, dst = src.index_select(0, perm), dst.index_select(0, perm)
        crow = _row_pointer(dst, num_dst)
        degree = 0
        if not compiling and num_dst:
            deg = crow[1:] - crow[:-1]
            degree = int(deg[0]) if bool((deg == deg[0]).all()) else 0
        out = cls(perm, dst, src, crow, num_dst, degree, checked=True, num_sources=num_src)
        if transpose and not compiling:
            out.parts(True)
        return out

    def parts(self, transpose: bool) -> Parts:
        """The operator arguments; with ``transpose=True`` the transposed pattern's (built,
        and outside ``torch.compile`` cached, on first call)."""
        if not transpose:
            return self.crow, self.col, None, None, None, None
        if self.perm_t is not None:
            return self.crow, self.col, self.crow_t, self.col_t, self.perm_t, self.iperm_t
        if self.num_sources is None:
            crow_t, col_t, perm_t, iperm_t = csr_transpose(self.crow, self.col)
        else:
            crow_t, col_t, perm_t, iperm_t = self._bipartite_transpose()
        if not tracing():
            self.perm_t, self.iperm_t, self.crow_t, self.col_t = perm_t, iperm_t, crow_t, col_t
        return self.crow, self.col, crow_t, col_t, perm_t, iperm_t


    def _bipartite_transpose(self) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """The transposed pattern of a bipartite structure (``num_src + 1`` row pointer): the
        square transpose of the pattern padded with empty target rows up to
        ``max(N_src, N_dst)``, its pointer cut to the sources (rows past ``N_src`` are empty)."""
        n_src, n_dst = self.num_src, self.num_nodes
        crow = self.crow
        if n_src > n_dst:
            crow = torch.cat([crow, crow[-1:].expand(n_src - n_dst)])
        crow_t, col_t, perm_t, iperm_t = csr_transpose(crow, self.col)
        return crow_t[:n_src + 1], col_t, perm_t, iperm_t


def _needs_transpose(*ts: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _fits(s: CSRStructure, *ts: Tensor, sources: bool = False) -> None:
    """``ValueError`` unless the node features ``ts`` have the structure's ``num_nodes`` rows
    (with ``sources``: its ``num_src`` rows, which differ in a bipartite structure; left out
    under ``torch.compile``, where sizes are symbols)."""
    if tracing():
        return
    n = s.num_src if sources else s.num_nodes
    for t in ts:
        if t.shape[0] != n:
            if s.num_sources is not None:
                raise ValueError(f"csr: the bipartite CSRStructure has {s.num_src} sources and {s.num_nodes} "
                                 f"targets but the {'source' if sources else 'target'} features have "
                                 f"{t.shape[0]} rows; pass csr=CSRStructure.build(edge_index, num_dst, "
                                 f"num_sources=num_src) of these edges")
            raise ValueError(f"csr: the CSRStructure was built for {s.num_nodes} nodes but the features have "
                             f"{t.shape[0]}; pass csr=CSRStructure.build(edge_index, num_nodes) of these edges")


def csr_sddmm(s: CSRStructure, A: Tensor, B: Tensor) -> Tensor:
    """``(E,)`` with ``A[dst_e] . B[src_e]`` for ``A, B (N, D)``, or ``(H, E)`` per head for
    ``A, B (N, H, D)`` (sorted edge order)."""
    if A.dim() == 2:
        return csr_sddmm(s, A.unsqueeze(1), B.unsqueeze(1))[0]
    _fits(s, A)
    _fits(s, B, sources=True)
    return _sddmm_op(A, B, *s.parts(_needs_transpose(A, B)))


def csr_spmm(s: CSRStructure, w: Tensor, V: Tensor) -> Tensor:
    """``(N, D)`` with ``sum_{e -> i} w_e V[src_e]`` for ``w (E,)``, ``V (N, D)``, or
    ``(N, H, Dv)`` per head for ``w (H, E)``, ``V (N, H, Dv)``."""
    if w.dim() == 1:
        return csr_spmm(s, w.unsqueeze(0), V.unsqueeze(1))[:, 0]
    _fits(s, V, sources=True)
    return _spmm_op(w, V, *s.parts(_needs_transpose(w, V)))


# ------------------------------------------------------------- multi-head wrappers
# Heads-first (H, E) layout: every head's scores and weights are contiguous rows, which the
# per-head sparse kernels and the dense softmax read without copies. On complete structures
# (all pairs within equal-size clouds) both products are batched (H, B, n, n) matmuls.

def csr_scores(s: CSRStructure, q: Tensor, k: Tensor) -> Tensor:
    """Dot products ``(H, E)`` (sorted edge order), ``score[h, e] = q[dst_e, h] . k[src_e, h]``
    for ``q, k (N, H, D)``."""
    N, H, D = q.shape
    _fits(s, q)
    _fits(s, k, sources=True)
    if s.complete:
        n = s.degree
        qb, kb = (t.view(N // n, n, H, D).permute(2, 0, 1, 3) for t in (q, k))  # (H, B, n, D)
        return (qb @ kb.transpose(-1, -2)).reshape(H, -1)
    return csr_sddmm(s, q, k)


def csr_aggregate(s: CSRStructure, w: Tensor, v: Tensor) -> Tensor:
    """``(N, H * Dv)`` with ``out[i, h] = sum_{e -> i} w[h, e] v[src_e, h]`` for weights
    ``w (H, E)`` (contiguous, sorted edge order) and ``v (N, H, Dv)`` (bipartite: ``v`` has
    the ``N_src`` source rows, the output the ``N_dst`` target rows)."""
    N, H, Dv = v.shape
    _fits(s, v, sources=True)
    if s.complete:
        n = s.degree
        vb = v.view(N // n, n, H, Dv).permute(2, 0, 1, 3)
        return (w.view(H, N // n, n, n) @ vb).permute(1, 2, 0, 3).reshape(N, H * Dv)
    if s.num_sources is not None:  # bipartite: one row per target
        return csr_spmm(s, w, v).reshape(s.num_nodes, H * Dv)
    return csr_spmm(s, w, v).reshape(N, H * Dv)


def to_edge_order(s: CSRStructure, t: Tensor) -> Tensor:
    """Rows of ``t (E, ...)`` from sorted back to the original edge order."""
    return t if s.perm is None else torch.empty_like(t).index_copy_(0, s.perm, t)


# -------------------------------------------------------------------------- softmax attention
def csr_softmax(s: CSRStructure, score: Tensor) -> Tensor:
    r"""``(H, E)`` weights ``w_{h,e} = \exp s_{h,e} / \sum_{e' \to i} \exp s_{h,e'}`` of the
    scores ``score (H, E)`` (sorted edge order) over each target's incoming edges: one dense
    softmax over ``(H, N, K)`` where every target has the same in-degree ``K``
    (``s.degree``), else :func:`~pyg_lie.ops.segment_softmax` along the row pointer."""
    H, E = score.shape
    if s.degree > 0:
        return dense_softmax(score.reshape(H, -1, s.degree), -1).reshape(H, E)
    if E == 0:
        return score.clone()
    return segment_softmax(score, s.crow, 1, validate=False)


def csr_softmax_attention(s: CSRStructure, q: Tensor, k: Tensor, v: Tensor, l: Optional[Tensor] = None,
                          b: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    r"""Multi-head softmax attention on the target-sorted edges of ``s``:

    .. math::
        w_{h,e} = \operatorname{softmax}_{e \to i}\big(q_{i,h} \cdot k_{j,h} + l_{h,e} + b_{(h,)e}\big),
        \qquad \mathrm{out}_{i,h} = \sum_{e = (j \to i)} w_{h,e}\, v_{j,h}

    Args:
        s: the :class:`CSRStructure` of the edges (bipartite: ``k, v`` have its ``N_src``
            source rows, ``q`` and the output its ``N_dst`` target rows).
        q: ``(N, H, D)`` queries (scaled as wanted).
        k, v: ``(N, H, D)`` keys and values.
        l: optional ``(H, E)`` location scores, in the structure's sorted edge order (permute
            per-edge inputs of the given order with ``s.perm``).
        b: optional additive log-bias ``(E,)`` or ``(H, E)``, sorted edge order.

    Returns:
        ``(out (N, H, D), w (H, E))``, ``w`` in sorted edge order. Differentiable twice.

    Which kernel runs is chosen here: the fused operator :func:`~pyg_lie.ops.csr_attention`
    (one native CPU kernel for the SDDMM, the softmax and the SpMM row by row; Triton on CUDA),
    with the structure's cached transposed pattern feeding its backward; or, for complete
    clouds on CPU under the ``auto`` backend (batched matrix products), under
    ``torch.compile`` (the unfused operators trace as they are) and on bipartite structures
    (the fused kernels take one node set), :func:`csr_scores`, :func:`csr_softmax` and
    :func:`csr_aggregate`.
    """
    if not isinstance(s, CSRStructure):
        raise TypeError(f"s must be a pyg_lie.ops.CSRStructure (CSRStructure.build(edge_index, num_nodes)), "
                        f"got {type(s).__name__}")
    if not tracing():  # (evaluating the sizes alone broke guards of dynamic shapes)
        E = s.col.numel()
        s.check(q.shape[0], E)
        if l is not None and l.shape != (q.shape[1], E):
            raise ValueError(f"the location scores l must have shape (H, E) = {(q.shape[1], E)}, one per head "
                             f"and edge of the structure, got {tuple(l.shape)} (location features of another "
                             f"length, e.g. a rel_log that is not of these edges?)")
    if tracing() or s.num_sources is not None or (s.complete and _backend.torch_path(q)):
        return _unfused_attention(s, q, k, v, l, b)
    transpose = None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, l, b)):
        _, _, crow_t, col_t, perm_t, _ = s.parts(True)
        transpose = (crow_t, col_t, perm_t)
    # a structure that checked its pattern when made is not checked again
    return csr_attention(q, k, v, s.crow, s.col, l, b, transpose=transpose, validate=False if s.checked else None)


def _unfused_attention(s: CSRStructure, q: Tensor, k: Tensor, v: Tensor, l: Optional[Tensor] = None,
                       b: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`csr_softmax_attention` as scores, softmax and aggregation."""
    score = csr_scores(s, q, k)
    if l is not None:
        score = score + l
    if b is not None:
        score = score + b
    w = csr_softmax(s, score)
    out = csr_aggregate(s, w, v)
    if s.num_sources is not None:
        return out.view(s.num_nodes, *v.shape[1:]), w
    return out.view(v.shape), w
