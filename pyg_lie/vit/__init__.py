"""Vision transformers equivariant to discrete subgroups of O(2) (C_n, D_n).

Implements "A Unified Framework for Vision Transformers Equivariant to Discrete
Subgroups of O(2)": field types, Schur linear layers, patch embeddings on square and
hexagonal grids, Fourier nonlinearities on G-sets, equivariant multi-head attention as a
PyG ``MessagePassing`` layer, the restriction of field types to subgroups (Theorem 2; the
model's is :meth:`EquivariantViT.restrict <pyg_lie.models.EquivariantViT.restrict>`).

The groups and their closed-form irreps are :class:`~pyg_lie.groups.Cn` and
:class:`~pyg_lie.groups.Dn` (:mod:`pyg_lie.groups.finite`), G-sets and intertwiners live in
:mod:`pyg_lie.groups.finite_reps`; ``get_group``, ``FiniteO2Group``, ``Irrep`` and ``GSet``
are re-exported here. The escnn converters live in :mod:`pyg_lie.interop.escnn`
(re-exported here and by ``pyg_lie.vit.escnn_interop``).
"""
from .._lazy import lazy_getattr

_LAZY = {
    "FiniteO2Group": "pyg_lie.groups.finite",
    "Irrep": "pyg_lie.groups.finite",
    "GSet": "pyg_lie.groups.finite_reps",
    "get_group": "pyg_lie.vit.irreps",
    "FieldType": "pyg_lie.vit.field_type",
    "EquivariantLinear": "pyg_lie.vit.linear",
    "EquivariantRMSNorm": "pyg_lie.vit.linear",
    "SquareGrid": "pyg_lie.vit.patch_embed",
    "HexGrid": "pyg_lie.vit.patch_embed",
    "EquivariantPatchEmbed": "pyg_lie.vit.patch_embed",
    "InvariantPositionalEncoding": "pyg_lie.vit.positional",
    "FourierNonlinearity": "pyg_lie.vit.nonlinearity",
    "gset_family": "pyg_lie.vit.nonlinearity",
    "EquivariantSelfAttention": "pyg_lie.vit.attention",
    "restriction_matrix": "pyg_lie.vit.field_type",
    "to_escnn_type": "pyg_lie.interop.escnn",
    "to_geometric_tensor": "pyg_lie.interop.escnn",
    "from_geometric_tensor": "pyg_lie.interop.escnn",
}
__all__ = list(_LAZY)
__getattr__ = lazy_getattr(__name__, _LAZY)
