"""Field types: a representation ``V = (+)_rho R^{C_rho} (x) V_rho`` of ``C_n``/``D_n``.

A feature tensor of type ``V`` is stored flat as ``(..., dim)`` with
``dim = sum_rho C_rho d_rho``; the irreps come in the group's irrep order and each
block is laid out row-major as ``(C_rho, d_rho)`` (the paper's Section 4 storage):
:meth:`FieldType.split` returns the views ``(..., C_rho, d_rho)`` and
:meth:`FieldType.join` is its inverse.
"""
from __future__ import annotations

from typing import Mapping, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from .irreps import FiniteO2Group, Irrep, get_group

__all__ = ["FieldType"]


class FieldType:
    """Irreps with multiplicities.

    Args:
        group: a :class:`FiniteO2Group` or its name (``"D4"``).
        multiplicities: ``{irrep name: C_rho}``; missing irreps have multiplicity 0.

    Example:
        >>> V = FieldType.regular("D4", 3)   # 3 copies of the regular rep, dim 24
        >>> [b.shape for b in V.split(torch.zeros(5, V.dim))]
        [torch.Size([5, 3, 1]), ..., torch.Size([5, 6, 2])]
    """

    def __init__(self, group: Union[str, FiniteO2Group], multiplicities: Mapping[str, int]):
        self.group = get_group(group) if isinstance(group, str) else group
        names = {r.name for r in self.group.irreps}
        for k, v in multiplicities.items():
            if k not in names:
                raise ValueError(f"multiplicities: {self.group.name} has no irrep {k!r} (irreps: {sorted(names)})")
            if int(v) < 0:
                raise ValueError(f"multiplicities: C_{k} must be >= 0, got {v}")
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
        g = get_group(group) if isinstance(group, str) else group
        return cls(g, g.regular_multiplicities(copies))

    @classmethod
    def trivial(cls, group: Union[str, FiniteO2Group], channels: int) -> "FieldType":
        g = get_group(group) if isinstance(group, str) else group
        return cls(g, {g.irreps[0].name: channels})

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
        f, k = self.group.elements[g]
        for r, C, s in self.blocks:
            out[s, s] = np.kron(np.eye(C), r.matrix(f, k))
        return out

    def transform(self, x: Tensor, g: int) -> Tensor:
        """Apply ``rho_V(g)`` to features ``(..., dim)``."""
        M = torch.as_tensor(self.representation(g), dtype=x.dtype, device=x.device)
        return x @ M.T

    def restrict(self, H: FiniteO2Group, embedding: Sequence[int]) -> "FieldType":
        """Multiplicities of ``V`` as an ``H``-representation (see :mod:`.restrict`)."""
        from .restrict import restriction_matrix
        return restriction_matrix(self, H, embedding)[0]
