"""Matrix Lie groups with one small interface (see :class:`LieGroup`).

Groups: ``Tn(n)`` (translations of ``R^n``), ``SO2``, ``SE2``, ``SO3``, ``SE3``, ``Aff2``,
``Aff3``; finite subgroups ``Cn(k)`` and ``Dn(k)`` of O(2) and ``Tetrahedral()``,
``Octahedral()``, ``Icosahedral()`` of SO(3) (``finite_group("D4")`` by name; the irreps of
``Cn`` and ``Dn`` in closed form, G-sets and intertwiners in :mod:`pyg_lie.groups.finite_reps`).
``get_group("SE2")`` returns a Lie group by name (the names are the keys of ``GROUPS``).
Elements are ``(..., m, m)`` matrices, algebra elements ``(..., dim)`` coordinates in a
Frobenius-orthonormal basis; every map is batched, works in float32 and float64 on any device
and is differentiable.
"""
from __future__ import annotations

from .aff import Aff2, Aff3
from .base import LieGroup
from .finite import Cn, Dn, FiniteGroup, FiniteO2Group, Icosahedral, Octahedral, Tetrahedral, finite_group
from .se2 import SE2
from .se3 import SE3
from .so2 import SO2
from .so3 import SO3
from .tn import Tn

__all__ = ["LieGroup", "Tn", "SO2", "SE2", "get_group", "GROUPS", "SO3", "SE3", "Aff2", "Aff3",
           "FiniteGroup", "FiniteO2Group", "Cn", "Dn", "Tetrahedral", "Octahedral", "Icosahedral", "finite_group"]

#: name -> factory of every Lie group
GROUPS = {
    "T1": lambda: Tn(1),
    "T2": lambda: Tn(2),
    "T3": lambda: Tn(3),
    "SO2": SO2,
    "SE2": SE2,
    "SO3": SO3,
    "SE3": SE3,
    "Aff2": Aff2,
    "Aff3": Aff3,
}


def get_group(group: "str | LieGroup") -> LieGroup:
    """Return a group object from a name such as ``"SE2"`` (or pass one through)."""
    if isinstance(group, LieGroup):
        return group
    if not isinstance(group, str) or group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; choose one of {sorted(GROUPS)} or pass a LieGroup")
    return GROUPS[group]()
