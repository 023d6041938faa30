"""The attention step of the S^2 neighbourhood attention layers (their neighbour search,
:func:`~pyg_lie.nn._s2_graph.geodesic_neighbors`, is a graph builder and lives apart).

* :class:`BipartiteCSR` and :func:`neighborhood_attention` -- a neighbourhood graph
  ``j -> i`` between two point sets held as the attention engine's one CSR structure
  (:class:`~pyg_lie.ops.CSRStructure`), and the quadrature-weighted softmax
  attention on it through the engine's one entry point
  (:func:`~pyg_lie.nn.attention_core.csr_softmax_attention`, which LieSelfAttention uses
  too). There is no S^2-specific kernel: the log quadrature weight of each source enters
  as the location score of its edges.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _checks as checks
from ..ops import CSRStructure, argsort_keys, to_edge_order
from .attention_core import csr_softmax_attention

__all__ = ["BipartiteCSR", "neighborhood_attention"]


# --------------------------------------------------------------------------- graph
class BipartiteCSR:
    """A neighbourhood graph ``j -> i`` from ``num_src`` sources to ``num_dst`` targets as
    the attention engine's CSR structure.

    ``csr`` is a :class:`~pyg_lie.ops.CSRStructure` over
    ``max(num_src, num_dst)`` nodes (the shorter side is padded with rows that no edge
    touches): target-sorted edges, their row pointer, the permutation from the given edge
    order (``csr.perm``) and, once a gradient needs it, the transposed pattern. Built once
    per graph and reused (the grid layer caches one per grid pair); any device.
    """

    def __init__(self, csr: CSRStructure, num_src: int, num_dst: int) -> None:
        self.csr = csr
        self.num_src = int(num_src)
        self.num_dst = int(num_dst)
        self._num_isolated: Optional[int] = None

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_src: int, num_dst: int, keep_order: bool = False,
                        transpose: bool = False) -> "BipartiteCSR":
        """Build the structure of a ``(2, E)`` edge index ``[source; target]`` (any edge order,
        PyG's ``EdgeIndex`` included; ``ValueError`` naming ``edge_index`` for sources outside
        ``[0, num_src)`` or targets outside ``[0, num_dst)``).

        Args:
            keep_order: keep the given order of the sources within each neighbourhood
                (default: by source index). The grid layer orders them by ring and
                longitude offset, so that every output longitude sums in the same order.
            transpose: also build the transposed pattern that gradients need.
        """
        num_src = checks.nonnegative_int("num_src", num_src)
        num_dst = checks.nonnegative_int("num_dst", num_dst)
        checks.edge_index(edge_index)
        ei = checks.plain_index("edge_index", edge_index)
        if num_src != num_dst:  # (CSRStructure checks the indices of a square graph)
            checks.index_range("edge_index[0]", ei[0], num_src, "source")
            checks.index_range("edge_index[1]", ei[1], num_dst, "target")
        n = max(num_src, num_dst)
        if not keep_order:
            return cls(CSRStructure.build(ei, n, transpose=transpose), num_src, num_dst)
        src, dst = ei[0], ei[1]
        perm = None
        if dst.numel() > 1 and (checks.tracing() or bool((dst[1:] < dst[:-1]).any())):
            perm = argsort_keys(dst)[1]  # stable: each neighbourhood keeps its order
            src, dst = src.index_select(0, perm), dst.index_select(0, perm)
        crow = torch.searchsorted(dst, torch.arange(n + 1, device=dst.device))
        csr = CSRStructure(perm, dst, src, crow, n)
        if transpose:
            csr.parts(True)
        return cls(csr, num_src, num_dst)

    @property
    def num_edges(self) -> int:
        return self.csr.col.numel()

    @property
    def num_isolated(self) -> int:
        """Targets without a neighbour (one pass over the row pointer, then cached)."""
        if self._num_isolated is None:
            crow = self.csr.crow
            self._num_isolated = int((crow[1:self.num_dst + 1] == crow[:self.num_dst]).sum())
        return self._num_isolated

    def to(self, device) -> "BipartiteCSR":
        s = self.csr
        moved = {name: (None if t is None else t.to(device)) for name, t in (
            ("perm", s.perm), ("row", s.row), ("col", s.col), ("crow", s.crow), ("perm_t", s.perm_t),
            ("crow_t", s.crow_t), ("col_t", s.col_t), ("iperm_t", s.iperm_t))}
        out = BipartiteCSR(CSRStructure(num_nodes=s.num_nodes, degree=s.degree, complete=s.complete, checked=True,
                                        **moved), self.num_src, self.num_dst)
        out._num_isolated = self._num_isolated
        return out

    def __repr__(self) -> str:
        return f"BipartiteCSR(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


# --------------------------------------------------------------------------- attention
def _padded(t: Tensor, rows: int, width: int) -> Tensor:
    """``t (N, M, D)`` with zero rows up to ``rows`` and zero channels up to ``width`` (one copy)."""
    if t.shape[0] == rows and t.shape[-1] == width:
        return t
    return torch.nn.functional.pad(t, (0, width - t.shape[-1], 0, 0, 0, rows - t.shape[0]))


def neighborhood_attention(q: Tensor, k: Tensor, v: Tensor, log_w: Optional[Tensor], graph: BipartiteCSR,
                           need_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    r"""Quadrature-weighted neighbourhood softmax attention on a :class:`BipartiteCSR`.

    .. math::
        y_i = \sum_{j \in N(i)} \frac{w_j \exp(q_i \cdot k_j)}{\sum_{l \in N(i)} w_l \exp(q_i \cdot k_l)} v_j

    computed by the attention engine as a softmax of ``q_i . k_j + log w_j`` over each
    neighbourhood (the log weights are the location scores of the edges), all leading
    dimensions of the features (batch, heads) being heads of the engine.

    Args:
        q: ``(N_dst, *, D)`` queries (already scaled).
        k: ``(N_src, *, D)`` keys.
        v: ``(N_src, *, Dv)`` values.
        log_w: ``(N_src,)`` log quadrature weights of the sources, or ``None``.
        graph: the neighbourhoods.
        need_weights: also return the attention weights in the given edge order ``(E, *)``.

    Returns:
        ``(N_dst, *, Dv)`` output (zeros for targets without neighbours) and optionally the
        ``(E, *)`` attention weights. Differentiable twice (in ``log_w`` too).
    """
    s = graph.csr
    n, E = s.num_nodes, s.col.numel()
    lead, Dv = q.shape[1:-1], v.shape[-1]
    # One width for keys and values, in float32 a multiple of 8, the width of the fused kernel
    # (narrower heads through the unfused steps took over twice as long): zero channels add
    # nothing to q . k, and the value's zero channels give output channels that are dropped.
    width = max(q.shape[-1], Dv)
    if q.dtype == torch.float32:
        width = -(-width // 8) * 8
    q2, k2, v2 = (_padded(t.reshape(t.shape[0], -1, t.shape[-1]), n, width) for t in (q, k, v))
    M = q2.shape[1]
    if log_w is None:
        l = q2.new_zeros(M, E)
    else:
        l = log_w.to(q2.dtype).index_select(0, s.col).unsqueeze(0).expand(M, E).contiguous()
    out, w = csr_softmax_attention(s, q2, k2, v2, l)
    out = out[:graph.num_dst, :, :Dv].reshape(graph.num_dst, *lead, Dv)
    alpha = to_edge_order(s, w.t()).reshape(E, *lead) if need_weights else None
    return out, alpha
