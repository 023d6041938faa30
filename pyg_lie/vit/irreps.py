"""Former home of the ``C_n`` / ``D_n`` group model, kept so that old imports work.

The groups live in :mod:`pyg_lie.groups.finite` (:class:`~pyg_lie.groups.finite.Cn`,
:class:`~pyg_lie.groups.finite.Dn`, their common model
:class:`~pyg_lie.groups.finite.FiniteO2Group` and the closed-form irreps), the
representation theory in :mod:`pyg_lie.groups.finite_reps`. ``get_group`` here is
:func:`~pyg_lie.groups.finite.o2_group`.
"""
from ..groups.finite import J2, FiniteO2Group, Irrep
from ..groups.finite import o2_group as get_group
from ..groups.finite_reps import GSet, intertwiners, invariant_subspace

__all__ = ["Irrep", "FiniteO2Group", "get_group", "intertwiners", "invariant_subspace", "GSet", "J2"]
