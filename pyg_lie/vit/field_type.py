"""Field types: a representation ``V = (+)_rho R^{C_rho} (x) V_rho`` of ``C_n``/``D_n``.

A feature tensor of type ``V`` is stored flat as ``(..., dim)`` with
``dim = sum_rho C_rho d_rho``; the irreps come in the group's irrep order and each
block is laid out row-major as ``(C_rho, d_rho)`` (the paper's Section 4 storage):
:meth:`FieldType.split` returns the views ``(..., C_rho, d_rho)`` and
:meth:`FieldType.join` is its inverse.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from .. import _checks
from ..groups.finite import FiniteO2Group, Irrep, o2_group
from ..groups.finite_reps import irrep_restriction

__all__ = ["FieldType", "restriction_matrix"]


class FieldType:
    """Irreps with multiplicities.

    Args:
        group: a :class:`~pyg_lie.groups.Cn` / :class:`~pyg_lie.groups.Dn` or its name (``"D4"``).
        multiplicities: ``{irrep name: C_rho}``; missing irreps have multiplicity 0.

    Example:
        >>> V = FieldType.regular("D4", 3)   # 3 copies of the regular rep, dim 24
        >>> [b.shape for b in V.split(torch.zeros(5, V.dim))]
        [torch.Size([5, 3, 1]), ..., torch.Size([5, 6, 2])]
    """

    def __init__(self, group: Union[str, FiniteO2Group], multiplicities: Mapping[str, int]):
        self.group = o2_group(group)
        names = {r.name for r in self.group.irreps}
        for k, v in multiplicities.items():
            if k not in names:
                raise ValueError(f"multiplicities: {self.group.name} has no irrep {k!r} (irreps: {sorted(names)})")
            _checks.size(f"multiplicities: C_{k}", v, low=0)
        self.mult: dict[str, int] = {r.name: int(multiplicities.get(r.name, 0)) for r in self.group.irreps}
        self.blocks: list[tuple[Irrep, int, slice]] = []
        off = 0
        for r in self.group.irreps:
            C = self.mult[r.name]
            self.blocks.append((r, C, slice(off, off + C * r.dim)))
            off += C * r.dim
        self.dim = off

    # ------------------------------------------------------------ constructors
    @classmethod
    def regular(cls, group: Union[str, FiniteO2Group], copies: int = 1) -> "FieldType":
        """``copies`` copies of the regular representation (``C_rho = copies d_rho / dim End``)."""
        g = o2_group(group)
        return cls(g, g.regular_multiplicities(_checks.size("copies", copies, low=0)))

    @classmethod
    def trivial(cls, group: Union[str, FiniteO2Group], channels: int) -> "FieldType":
        g = o2_group(group)
        return cls(g, {g.irreps[0].name: _checks.size("channels", channels, low=0)})

    # --------------------------------------------------------------- utilities
    def __repr__(self) -> str:
        body = ", ".join(f"{k}:{v}" for k, v in self.mult.items() if v)
        return f"FieldType({self.group.name}, [{body}], dim={self.dim})"

    def __eq__(self, other) -> bool:
        return isinstance(other, FieldType) and self.group == other.group and self.mult == other.mult

    def __hash__(self) -> int:
        return hash((self.group.name, tuple(self.mult.items())))

    def __add__(self, other: "FieldType") -> "FieldType":
        if other.group != self.group:
            raise ValueError("cannot add field types of different groups")
        return FieldType(self.group, {k: self.mult[k] + other.mult[k] for k in self.mult})

    @property
    def trivial_slice(self) -> slice:
        return self.blocks[0][2]

    def split(self, x: Tensor) -> list[Tensor]:
        """Flat ``(..., dim)`` to ``[(..., C_rho, d_rho)]`` (views), one per irrep."""
        if x.shape[-1] != self.dim:
            raise ValueError(f"x: last dimension must be {self.dim} for {self}, got {x.shape[-1]}")
        return [x[..., s].reshape(*x.shape[:-1], C, r.dim) for r, C, s in self.blocks]

    def join(self, parts: Sequence[Tensor]) -> Tensor:
        """Inverse of :meth:`split`."""
        return torch.cat([p.reshape(*p.shape[:-2], -1) for p in parts], dim=-1)

    def irrep_of_feature(self) -> list[tuple[int, int, int]]:
        """For every flat feature: ``(irrep index, channel, component)``."""
        out = []
        for i, (r, C, _) in enumerate(self.blocks):
            for c in range(C):
                for j in range(r.dim):
                    out.append((i, c, j))
        return out

    def representation(self, g: int) -> np.ndarray:
        """``(dim, dim)`` block-diagonal matrix ``(+)_rho I_{C_rho} (x) rho(g)`` (float64)."""
        out = np.zeros((self.dim, self.dim))
        f, k = self.group.pairs[g]
        for r, C, s in self.blocks:
            out[s, s] = np.kron(np.eye(C), r.matrix(f, k))
        return out

    def transform(self, x: Tensor, g: int) -> Tensor:
        """Apply ``rho_V(g)`` to features ``(..., dim)``."""
        M = torch.as_tensor(self.representation(g), dtype=x.dtype, device=x.device)
        return x @ M.T

    def restrict(self, H: Union[str, FiniteO2Group], embedding: Optional[Sequence[int]] = None) -> "FieldType":
        """``V`` as an ``H``-representation (see :func:`restriction_matrix`)."""
        return restriction_matrix(self, H, embedding)[0]


def restriction_matrix(V: FieldType, H: Union[str, FiniteO2Group], embedding: Optional[Sequence[int]] = None):
    """The restriction ``Res^G_H`` of a field type to a subgroup (the paper's Theorem 2, Lemma 2).

    Returns ``(W, R, source)``: ``W`` the ``H``-field type of ``V``, ``R`` the
    ``(W.dim, V.dim)`` orthogonal float64 matrix with ``R rho_V(e(h)) = rho_W(h) R``, and
    ``source[sigma]`` the ``(irrep index, channel)`` of ``V`` that each ``W``-channel of
    ``sigma`` comes from. ``embedding`` (index in ``G`` of every element of ``H``) defaults to
    :meth:`~pyg_lie.groups.finite.FiniteO2Group.subgroup_embedding`: ``r_H -> r^{n/m}``,
    ``t_H -> t``.
    """
    G = V.group
    H = o2_group(H)
    if embedding is None:
        embedding = G.subgroup_embedding(H)
    res = irrep_restriction(G, H, embedding)
    rows: dict[str, list] = {s.name: [] for s in H.irreps}  # per sigma: list of (src, M, slice)
    for i, (rho, C, sl) in enumerate(V.blocks):
        for c in range(C):
            cols = slice(sl.start + c * rho.dim, sl.start + (c + 1) * rho.dim)
            for sname, M in res[rho.name]:
                rows[sname].append(((i, c), M, cols))
    W = FieldType(H, {k: len(v) for k, v in rows.items()})
    R = np.zeros((W.dim, V.dim))
    source = {}
    for sigma, C, sl in W.blocks:
        source[sigma.name] = [src for src, _, _ in rows[sigma.name]]
        for cp, (_, M, cols) in enumerate(rows[sigma.name]):
            R[sl.start + cp * sigma.dim: sl.start + (cp + 1) * sigma.dim, cols] = M.T
    return W, R, source
