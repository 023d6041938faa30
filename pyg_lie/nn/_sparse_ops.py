"""Fused edge products on CSR graphs: SDDMM and SpMM with exact first and second derivatives.

``sddmm(A, B)`` gives ``s_e = A[dst_e] . B[src_e]`` and ``spmm(w, V)`` gives
``out_i = sum_{e: dst_e = i} w_e V[src_e]`` without materialising any ``(E, D)``
tensor (torch's ``sparse.sampled_addmm`` / ``sparse.mm`` kernels). Their
backward passes are written with the same three functions, so double backward
(gradients of gradients, needed by Hamiltonian models) works as well.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from .._sort import argsort_keys

__all__ = ["CSRStructure", "sddmm", "spmm"]


@dataclass
class CSRStructure:
    """Edges sorted by ``(dst, src)`` plus the transposed ordering.

    Attributes:
        perm: ``(E,)`` sorted position -> original edge id (``None``: already sorted).
        row, col: ``(E,)`` destination and source of every sorted edge.
        crow: ``(N + 1,)`` CSR row pointer over destinations.
        perm_t: ``(E,)`` order of the sorted edges by ``(src, dst)``.
        crow_t, col_t: CSR of the transpose (rows = sources, cols = destinations).
            These three are built on first use (the batched path of complete
            clouds never needs them, and their sort is the costliest step).
        num_nodes: ``N``.
        degree: the common in-degree ``K`` when every node has ``K >= 1`` incoming
            edges (complete or kNN graphs), else 0; then the sorted edges of node
            ``i`` are rows ``i K .. (i + 1) K - 1`` and per-node reductions are dense.
        complete: True when, moreover, the nodes form consecutive blocks of ``K`` and
            every node's sources are exactly its block (all pairs within equal-size
            clouds, self-pairs included): the sorted scores are then the ``(B, K, K)``
            blocks of a batched matrix, and SDDMM / SpMM are batched matrix products.
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

    @classmethod
    def build(cls, edge_index: Tensor, num_nodes: int) -> "CSRStructure":
        src, dst = edge_index[0], edge_index[1]
        key = dst * num_nodes + src
        perm = None
        if key.numel() > 1 and bool((key[1:] < key[:-1]).any()):
            perm = argsort_keys(key)[1]
            src, dst = src.index_select(0, perm), dst.index_select(0, perm)
        crow = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device)
        deg = torch.bincount(dst, minlength=num_nodes)
        crow[1:] = torch.cumsum(deg, 0)
        degree = int(deg[0]) if num_nodes and bool((deg == deg[0]).all()) else 0
        complete = False
        if degree and num_nodes % degree == 0:  # is node i's source list its whole block?
            local = torch.arange(degree, device=dst.device).repeat(num_nodes)
            complete = bool((src - (dst - dst % degree) == local).all())
        return cls(perm, dst, src, crow, num_nodes, degree, complete)

    def _build_transpose(self) -> None:
        self.perm_t = argsort_keys(self.col * self.num_nodes + self.row)[1]  # (src, dst) order
        self.crow_t = torch.zeros(self.num_nodes + 1, dtype=torch.long, device=self.col.device)
        self.crow_t[1:] = torch.cumsum(torch.bincount(self.col, minlength=self.num_nodes), 0)
        self.col_t = self.row.index_select(0, self.perm_t)

    def _csr(self, values: Tensor, transpose: bool = False) -> Tensor:
        n = self.num_nodes
        if transpose and self.perm_t is None:
            self._build_transpose()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
            if transpose:  # index_select: 4x faster than values[perm_t] for 1-D values on CPU
                return torch.sparse_csr_tensor(self.crow_t, self.col_t, values.index_select(0, self.perm_t),
                                               (n, n))
            return torch.sparse_csr_tensor(self.crow, self.col, values, (n, n))


def _sddmm_raw(s: CSRStructure, A: Tensor, B: Tensor) -> Tensor:
    if s.row.numel() == 0:
        return A.new_zeros(0)
    pattern = s._csr(torch.zeros(s.row.numel(), dtype=A.dtype, device=A.device))
    return torch.sparse.sampled_addmm(pattern, A.contiguous(), B.t().contiguous(), beta=0.0).values()


class _SDDMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B, s):
        ctx.s = s
        ctx.save_for_backward(A, B)
        return _sddmm_raw(s, A, B)

    @staticmethod
    def backward(ctx, g):
        A, B = ctx.saved_tensors
        s = ctx.s
        gA = _SpMM.apply(g, B, s, False) if ctx.needs_input_grad[0] else None
        gB = _SpMM.apply(g, A, s, True) if ctx.needs_input_grad[1] else None
        return gA, gB, None


class _SpMM(torch.autograd.Function):
    """``transpose=False``: ``out[dst] += w V[src]``; ``True``: ``out[src] += w V[dst]``."""

    @staticmethod
    def forward(ctx, w, V, s, transpose):
        ctx.s, ctx.transpose = s, transpose
        ctx.save_for_backward(w, V)
        if w.numel() == 0:
            return V.new_zeros(s.num_nodes, V.size(1))
        return torch.sparse.mm(s._csr(w, transpose), V.contiguous())

    @staticmethod
    def backward(ctx, g):
        w, V = ctx.saved_tensors
        s, tr = ctx.s, ctx.transpose
        gw = gV = None
        if ctx.needs_input_grad[0]:
            gw = _SDDMM.apply(V, g, s) if tr else _SDDMM.apply(g, V, s)
        if ctx.needs_input_grad[1]:
            gV = _SpMM.apply(w, g, s, not tr)
        return gw, gV, None, None


def sddmm(s: CSRStructure, A: Tensor, B: Tensor) -> Tensor:
    """``(E,)`` with ``A[dst_e] . B[src_e]`` for ``A, B (N, D)`` (sorted edge order)."""
    return _SDDMM.apply(A, B, s)


def spmm(s: CSRStructure, w: Tensor, V: Tensor) -> Tensor:
    """``(N, D)`` with ``sum_{e -> i} w_e V[src_e]`` for ``w (E,)``, ``V (N, D)``."""
    return _SpMM.apply(w, V, s, False)
