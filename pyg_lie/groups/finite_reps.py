"""Representations of finite groups: invariant subspaces, intertwiners, G-sets and the
restriction of ``C_n`` / ``D_n`` irreps to subgroups.

Everything is numerical linear algebra in float64 numpy on element indices of a
:class:`~pyg_lie.groups.finite.FiniteGroup`; the irreps come from the closed forms of
:class:`~pyg_lie.groups.finite.FiniteO2Group`. The equivariant ViT (:mod:`pyg_lie.vit`)
builds its field types, Fourier nonlinearities, patch embeddings and restrictions on these.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from .finite import FiniteGroup, FiniteO2Group, Irrep

__all__ = ["invariant_subspace", "intertwiners", "irrep_restriction", "GSet"]


def invariant_subspace(mats: np.ndarray, tol: float = 1e-8) -> np.ndarray:
    """Orthonormal basis of ``{v : A v = v for all A in mats}``, shape ``(K, N)``."""
    N = mats.shape[-1]
    M = (mats - np.eye(N)[None]).reshape(-1, N)
    _, s, vt = np.linalg.svd(M, full_matrices=True)
    rank = int((s > tol * max(1.0, s.max() if s.size else 0.0)).sum())
    return vt[rank:]


def intertwiners(pi: np.ndarray, rho: Irrep, rho_mats: np.ndarray) -> np.ndarray:
    """Orthogonal copies of ``V_rho`` inside a representation ``pi``.

    Solves ``pi(g) M = M rho(g)`` on the generators and returns ``(m, N, d)``
    intertwiners with ``M_a^T M_b = delta_ab I``: the columns of all copies are
    orthonormal, and for complex-type irreps the ``End``-orbit ``{M L}`` of each copy is
    removed before picking the next, so ``m = dim Hom_G / dim End_G`` copies result.

    Args:
        pi: ``(|gens|, N, N)`` orthogonal matrices of the representation on generators.
        rho: the irrep.
        rho_mats: ``(|gens|, d, d)`` the irrep on the same generators.
    """
    N, d = pi.shape[-1], rho.dim
    ops = np.stack([np.kron(p, r) for p, r in zip(pi, rho_mats)])  # acts on row-major vec(M)
    basis = invariant_subspace(ops)  # (K, N*d)
    Ls = rho.end_basis()
    copies: list[np.ndarray] = []
    for v in basis:
        M = v.reshape(N, d)
        for R in copies:
            for L in Ls:
                RL = R @ L
                M = M - (M * RL).sum() / (RL * RL).sum() * RL
        nrm2 = (M * M).sum()
        if nrm2 > 1e-10:
            copies.append(M / math.sqrt(nrm2 / d))
    if not copies:
        return np.zeros((0, N, d))
    return np.stack(copies)


def irrep_restriction(G: FiniteO2Group, H: FiniteO2Group, embedding: Sequence[int]) -> dict[str, list]:
    """``{rho: [(sigma, M)]}`` for every irrep ``rho`` of ``G``: ``M`` ``(d_rho, d_sigma)`` with
    ``rho(e(h)) M = M sigma(h)`` for the embedding ``e`` of ``H`` (element indices, as
    :meth:`FiniteO2Group.subgroup_embedding` returns), the columns of all pieces an
    orthonormal basis of ``V_rho`` (first non-zero entry of each column positive, so
    trivial-to-trivial pieces are ``+1``)."""
    out = {}
    gens = H.generator_indices
    for rho in G.irreps:
        pis = np.stack([rho.matrix(*G.pairs[embedding[h]]) for h in gens])
        pieces = []
        for sigma in H.irreps:
            sm = np.stack([sigma.matrix(*H.pairs[h]) for h in gens])
            for M in intertwiners(pis, sigma, sm):
                first = M.reshape(-1)[np.argmax(np.abs(M.reshape(-1)) > 1e-9)]
                pieces.append((sigma.name, M * np.sign(first)))
        if sum(M.shape[1] for _, M in pieces) != rho.dim:
            raise RuntimeError(f"restriction of {rho.name} to {H.name} is incomplete")  # pragma: no cover
        out[rho.name] = pieces
    return out


class GSet:
    """A finite G-set ``X`` given by its permutation action.

    Args:
        group: the acting group.
        perm: ``(|G|, |X|)`` integer array, ``perm[g, x] = g . x``.

    The permutation representation on ``C(X, R)`` is ``(g f)(x) = f(g^{-1} x)``,
    i.e. ``pi(g) e_x = e_{g x}``.
    """

    def __init__(self, group: FiniteGroup, perm: np.ndarray):
        self.group = group
        self.perm = np.asarray(perm, dtype=np.int64)
        if self.perm.ndim != 2 or self.perm.shape[0] != group.order:
            raise ValueError(f"perm must have shape (|G|, |X|) = ({group.order}, |X|), got {self.perm.shape}")
        self.size = self.perm.shape[1]

    @classmethod
    def quotient(cls, group: FiniteGroup, subgroup: Sequence[int]) -> "GSet":
        """The homogeneous space ``G/H`` of left cosets ``gH`` (``subgroup``: element indices)."""
        H = sorted(set(int(h) for h in subgroup))
        cosets: list[tuple[int, ...]] = []
        lookup = {}
        for g in range(group.order):
            c = tuple(sorted(group.mul(g, h) for h in H))
            if c not in lookup:
                lookup[c] = len(cosets)
                cosets.append(c)
        perm = np.array([[lookup[tuple(sorted(group.mul(g, h) for h in c))] for c in cosets]
                         for g in range(group.order)])
        return cls(group, perm)

    @classmethod
    def disjoint_union(cls, sets: Sequence["GSet"]) -> "GSet":
        off, rows = 0, []
        for s in sets:
            rows.append(s.perm + off)
            off += s.size
        return cls(sets[0].group, np.concatenate(rows, axis=1))

    def restrict(self, H: FiniteGroup, embedding: Sequence[int]) -> "GSet":
        """The same points as an ``H``-set (``embedding``: index in ``G`` of every element of ``H``)."""
        return GSet(H, self.perm[list(embedding)])

    def perm_matrices(self, elems: Optional[Sequence[int]] = None) -> np.ndarray:
        """``pi(g)`` for the elements ``elems`` (default all), shape ``(len(elems), |X|, |X|)``."""
        elems = range(self.group.order) if elems is None else elems
        out = np.zeros((len(elems), self.size, self.size))
        for i, g in enumerate(elems):
            out[i, self.perm[g], np.arange(self.size)] = 1.0
        return out

    def orbits(self) -> list[list[int]]:
        seen, out = set(), []
        for x in range(self.size):
            if x in seen:
                continue
            orb = sorted(set(self.perm[:, x].tolist()))
            seen.update(orb)
            out.append(orb)
        return out

    def fourier_basis(self) -> dict[str, np.ndarray]:
        """``{irrep: Q}`` with ``Q`` of shape ``(m_rho, d_rho, |X|)``, orthonormal rows,
        ``rho(g) Q_a = Q_a pi(g)``; together the ``Q`` form an orthogonal FT of ``C(X)``
        (``C_n`` / ``D_n`` only: the irreps are those of :class:`FiniteO2Group`)."""
        G = self.group
        if not isinstance(G, FiniteO2Group):
            raise TypeError(f"fourier_basis needs a cyclic or dihedral group (its irreps), got {G.name}")
        pis = self.perm_matrices(G.generator_indices)
        out = {}
        for rho in G.irreps:
            rm = np.stack([rho.matrix(*G.pairs[g]) for g in G.generator_indices])
            M = intertwiners(pis, rho, rm)  # (m, |X|, d)
            out[rho.name] = M.transpose(0, 2, 1)
        return out
