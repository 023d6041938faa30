"""Restriction to subgroups (the paper's Theorem 2 and Lemma 2), kept so that old imports work.

:func:`~pyg_lie.vit.field_type.restriction_matrix` (the isometry ``Res^G_H`` of a field
type) lives beside :class:`~pyg_lie.vit.field_type.FieldType`,
:func:`~pyg_lie.groups.finite_reps.irrep_restriction` with the group theory, and the
restriction of a model is the method :meth:`EquivariantViT.restrict
<pyg_lie.models.equivariant_vit.EquivariantViT.restrict>`.
"""
from __future__ import annotations

import warnings

from ..groups.finite_reps import irrep_restriction
from .field_type import restriction_matrix

__all__ = ["restriction_matrix", "irrep_restriction", "restrict_model"]


def restrict_model(model, subgroup, tol: float = 1e-5):
    """Deprecated: use ``model.restrict(subgroup, tol)``."""
    warnings.warn("restrict_model(model, H) is deprecated; use model.restrict(H)", DeprecationWarning, stacklevel=2)
    return model.restrict(subgroup, tol=tol)
