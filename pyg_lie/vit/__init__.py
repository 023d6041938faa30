"""Vision transformers equivariant to discrete subgroups of O(2) (C_n, D_n).

Implements "A Unified Framework for Vision Transformers Equivariant to Discrete
Subgroups of O(2)": closed-form irreps,
field types, Schur linear layers, patch embeddings on square and hexagonal grids,
Fourier nonlinearities on G-sets, equivariant multi-head attention as a PyG
``MessagePassing`` layer, restriction to subgroups (Theorem 2). The escnn converters live in
:mod:`pyg_lie.interop.escnn` (re-exported here and by ``pyg_lie.vit.escnn_interop``).
"""
from .._lazy import lazy_getattr

_LAZY = {
    "FiniteO2Group": "pyg_lie.vit.irreps",
    "Irrep": "pyg_lie.vit.irreps",
    "GSet": "pyg_lie.vit.irreps",
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
    "restriction_matrix": "pyg_lie.vit.restrict",
    "to_escnn_type": "pyg_lie.interop.escnn",
    "to_geometric_tensor": "pyg_lie.interop.escnn",
    "from_geometric_tensor": "pyg_lie.interop.escnn",
}
__all__ = list(_LAZY)
__getattr__ = lazy_getattr(__name__, _LAZY)
