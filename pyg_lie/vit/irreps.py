"""Finite subgroups of O(2): cyclic ``C_n`` and dihedral ``D_n``, their real irreps
in closed form, subgroups, G-sets and a numerical intertwiner solver.

Conventions (the paper's Appendix A):

* ``C_n = <r | r^n = e>`` and ``D_n = <r, t | r^n = t^2 = e, t r = r^{-1} t>``.
* Every element is stored as a pair ``(f, k)`` meaning ``g = r^k t^f`` with index
  ``f * n + k``; the product is ``(f1, k1)(f2, k2) = (f1 xor f2, k1 + (-1)^{f1} k2)``.
* On the plane, ``r`` is the rotation :math:`\\mathbf R(2\\pi/n)` and ``t`` the
  reflection ``diag(1, -1)`` across the x-axis.
* Real irreps (Eq. 21-22): ``A`` / ``A1`` trivial, ``A2`` (``t -> -1``), ``B`` / ``B1``
  (``r -> -1``), ``B2`` (``r -> -1``, ``t -> -1``) and the two-dimensional
  ``E_j(r^k t^f) = R(2 pi j k / n) diag(1, -1)^f``. For ``C_n`` the ``E_j`` are of
  complex type: ``End_G(E_j) = span{I, J}`` with ``J = [[0, -1], [1, 0]]``.

All group-theoretic constants are computed in float64 numpy once and cached.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

__all__ = [
    "Irrep", "FiniteO2Group", "get_group", "intertwiners", "invariant_subspace",
    "GSet", "J2",
]

J2 = np.array([[0.0, -1.0], [1.0, 0.0]])
_T = np.diag([1.0, -1.0])


def _rot(theta: float) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s], [s, c]])


@dataclass(frozen=True)
class Irrep:
    """A real irrep of ``C_n`` or ``D_n``.

    Attributes:
        name: ``"A"``, ``"B"``, ``"A1"``, ``"A2"``, ``"B1"``, ``"B2"`` or ``"E{j}"``.
        dim: ``d_rho`` (1 or 2).
        kind: ``"real"`` (``End_G = R``) or ``"complex"`` (``End_G = C``).
        flip: flip frequency (0 or 1; dihedral only).
        freq: rotation frequency ``j`` (``B`` irreps have ``j = n/2``).
        n: the ``n`` of the group.
        dihedral: whether the group is ``D_n``.
    """

    name: str
    dim: int
    kind: str
    flip: int
    freq: int
    n: int
    dihedral: bool

    @property
    def is_trivial(self) -> bool:
        return self.flip == 0 and self.freq == 0

    @property
    def end_dim(self) -> int:
        """``dim End_G(V_rho)``: 1 (real type) or 2 (complex type)."""
        return 2 if self.kind == "complex" else 1

    def end_basis(self) -> np.ndarray:
        """Basis ``(L_mu)`` of ``End_G(V_rho)``, shape ``(end_dim, d, d)``."""
        if self.kind == "complex":
            return np.stack([np.eye(2), J2])
        return np.eye(self.dim)[None]

    def matrix(self, f: int, k: int) -> np.ndarray:
        """``rho(r^k t^f)`` as a ``(d, d)`` orthogonal matrix."""
        if self.dim == 1:
            val = (-1.0) ** (f * self.flip) * (-1.0) ** (k * (1 if 2 * self.freq == self.n else 0))
            return np.array([[val]])
        m = _rot(2 * math.pi * self.freq * k / self.n)
        return m @ _T if f else m


class FiniteO2Group:
    """The abstract group ``C_n`` or ``D_n`` with its canonical embedding into O(2).

    Args:
        n: rotation order (``>= 1``).
        dihedral: ``True`` for ``D_n`` (order ``2n``), ``False`` for ``C_n``.
    """

    def __init__(self, n: int, dihedral: bool):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = int(n)
        self.dihedral = bool(dihedral)
        self.name = f"{'D' if dihedral else 'C'}{n}"
        self.order = self.n * (2 if dihedral else 1)
        self.elements: list[tuple[int, int]] = [(f, k) for f in range(2 if dihedral else 1) for k in range(n)]
        self.irreps: list[Irrep] = self._build_irreps()

    # ---------------------------------------------------------------- algebra
    def __repr__(self) -> str:
        return f"FiniteO2Group({self.name})"

    def __eq__(self, other) -> bool:
        return isinstance(other, FiniteO2Group) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def index(self, f: int, k: int) -> int:
        return (f % 2) * self.n + (k % self.n)

    def mul(self, a: int, b: int) -> int:
        """Index of the product of elements ``a`` and ``b``."""
        f1, k1 = self.elements[a]
        f2, k2 = self.elements[b]
        return self.index(f1 ^ f2, k1 + (-k2 if f1 else k2))

    def inv(self, a: int) -> int:
        f, k = self.elements[a]
        return self.index(f, k if f else -k)

    @property
    def generators(self) -> list[int]:
        gens = [self.index(0, 1)]
        if self.dihedral:
            gens.append(self.index(1, 0))
        return gens

    def plane_matrix(self, a: int) -> np.ndarray:
        """The element as a ``2 x 2`` orthogonal matrix ``R(2 pi k/n) diag(1,-1)^f``."""
        f, k = self.elements[a]
        m = _rot(2 * math.pi * k / self.n)
        return m @ _T if f else m

    def word(self, w: str) -> int:
        """Evaluate a word such as ``"t"``, ``"r^2"``, ``"tr"``, ``"r2t"`` (left to right)."""
        g = 0
        for letter, exp in re.findall(r"([rte])\^?(-?\d*)", w.replace(" ", "")):
            e = int(exp) if exp not in ("", "-") else (-1 if exp == "-" else 1)
            if letter == "e":
                continue
            h = self.index(0, 1) if letter == "r" else self.index(1, 0)
            if letter == "t" and not self.dihedral:
                raise ValueError(f"{self.name} has no reflection t (word {w!r})")
            if e < 0:
                h = self.inv(h)
            for _ in range(abs(e)):
                g = self.mul(g, h)
        return g

    def closure(self, gens: Sequence[int]) -> list[int]:
        """Sorted element indices of the subgroup generated by ``gens``."""
        S = {0}
        frontier = [0]
        while frontier:
            new = []
            for s in frontier:
                for g in gens:
                    p = self.mul(s, g)
                    if p not in S:
                        S.add(p)
                        new.append(p)
            frontier = new
        return sorted(S)

    # ----------------------------------------------------------------- irreps
    def _build_irreps(self) -> list[Irrep]:
        n, D = self.n, self.dihedral
        out = []
        if D:
            out += [Irrep("A1", 1, "real", 0, 0, n, D), Irrep("A2", 1, "real", 1, 0, n, D)]
            if n % 2 == 0:
                out += [Irrep("B1", 1, "real", 0, n // 2, n, D), Irrep("B2", 1, "real", 1, n // 2, n, D)]
        else:
            out.append(Irrep("A", 1, "real", 0, 0, n, D))
            if n % 2 == 0:
                out.append(Irrep("B", 1, "real", 0, n // 2, n, D))
        for j in range(1, (n + 1) // 2):
            out.append(Irrep(f"E{j}", 2, "real" if D else "complex", 1 if D else 0, j, n, D))
        return out

    def irrep(self, name: str) -> Irrep:
        for rho in self.irreps:
            if rho.name == name:
                return rho
        raise KeyError(f"{self.name} has no irrep {name!r}; irreps: {[r.name for r in self.irreps]}")

    def irrep_index(self, rho: Irrep) -> int:
        return self.irreps.index(rho)

    def rep_matrices(self, rho: Irrep) -> np.ndarray:
        """``rho(g)`` for every element, shape ``(|G|, d, d)``."""
        return np.stack([rho.matrix(f, k) for f, k in self.elements])

    def regular_multiplicities(self, copies: int = 1) -> dict[str, int]:
        """Irrep multiplicities of ``copies`` regular representations: ``d/end_dim`` each."""
        return {rho.name: copies * rho.dim // rho.end_dim for rho in self.irreps}

    # -------------------------------------------------------------- subgroups
    def subgroup_embedding(self, H: "FiniteO2Group", axis: int = 0) -> list[int]:
        """Indices in ``G`` of the elements of ``H`` under the standard embedding.

        ``r_H -> r^{n/m}`` and, for dihedral ``H``, ``t_H -> r^axis t``; so the
        reflection axes of ``H`` are those of ``G`` (``axis=0``: the x-axis).
        """
        if self.n % H.n != 0 or (H.dihedral and not self.dihedral):
            raise ValueError(f"{H.name} is not a subgroup of {self.name}")
        s = self.n // H.n
        return [self.index(f, s * k + axis * f) for f, k in H.elements]


@functools.lru_cache(maxsize=None)
def get_group(name: str) -> FiniteO2Group:
    """``get_group("D4")``; also accepts a :class:`FiniteO2Group` name like ``"C6"``."""
    m = re.fullmatch(r"([CD])(\d+)", str(name).strip().upper())
    if not m:
        raise ValueError(f"group must look like 'C4' or 'D6', got {name!r}")
    return FiniteO2Group(int(m.group(2)), m.group(1) == "D")


# ----------------------------------------------------------------- linear algebra
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


# ------------------------------------------------------------------------ G-sets
class GSet:
    """A finite G-set ``X`` given by its permutation action.

    Args:
        group: the acting group.
        perm: ``(|G|, |X|)`` integer array, ``perm[g, x] = g . x``.

    The permutation representation on ``C(X, R)`` is ``(g f)(x) = f(g^{-1} x)``,
    i.e. ``pi(g) e_x = e_{g x}``.
    """

    def __init__(self, group: FiniteO2Group, perm: np.ndarray):
        self.group = group
        self.perm = np.asarray(perm, dtype=np.int64)
        if self.perm.shape[0] != group.order:
            raise ValueError("perm must have one row per group element")
        self.size = self.perm.shape[1]

    @classmethod
    def quotient(cls, group: FiniteO2Group, subgroup: Sequence[int]) -> "GSet":
        """The homogeneous space ``G/H`` of left cosets ``gH``."""
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

    def restrict(self, H: FiniteO2Group, embedding: Sequence[int]) -> "GSet":
        """The same points as an ``H``-set."""
        return GSet(H, self.perm[list(embedding)])

    def perm_matrices(self, elems: Optional[Sequence[int]] = None) -> np.ndarray:
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
        ``rho(g) Q_a = Q_a pi(g)``; together the ``Q`` form an orthogonal FT of ``C(X)``."""
        G = self.group
        pis = self.perm_matrices(G.generators)
        out = {}
        for rho in G.irreps:
            rm = np.stack([rho.matrix(*G.elements[g]) for g in G.generators])
            M = intertwiners(pis, rho, rm)  # (m, |X|, d)
            out[rho.name] = M.transpose(0, 2, 1)
        return out
