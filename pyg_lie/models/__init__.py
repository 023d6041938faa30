"""Complete models built from pyg_lie layers (imported lazily)."""
from .._lazy import lazy_getattr

_LAZY = {
    "LieTransformer": "pyg_lie.models.lie_transformer",
    "LieAlgebraTransformer": "pyg_lie.models.lie_algebra_transformer",
    "VectorTokenTransformer": "pyg_lie.models.lie_algebra_transformer",
    "LieAlgebraOutput": "pyg_lie.models.lie_algebra_transformer",
    "build_model": "pyg_lie.models.lie_algebra_transformer",
    "pose_error": "pyg_lie.models.lie_algebra_losses",
    "completion_loss": "pyg_lie.models.lie_algebra_losses",
    "equivariance_error": "pyg_lie.models.lie_algebra_losses",
    "EquivariantViT": "pyg_lie.models.equivariant_vit",
    "HamiltonianNODE": "pyg_lie.models.hamiltonian",
    "FCPotential": "pyg_lie.models.springs_baselines",
    "GraphNetworkPotential": "pyg_lie.models.springs_baselines",
}
__all__ = list(_LAZY)
__getattr__ = lazy_getattr(__name__, _LAZY)
