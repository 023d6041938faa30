"""Synthetic and PyG-backed data sets (imported lazily)."""
from .._lazy import lazy_getattr

_LAZY = {
    "Constellation": "pyg_lie.datasets.constellation",
    "LieSequenceCompletion": "pyg_lie.datasets.lie_sequence",
    "SpringDynamics": "pyg_lie.datasets.springs",
    "QM9Transform": "pyg_lie.datasets.qm9",
    "QM9": "pyg_lie.datasets.qm9_real",
}
__all__ = list(_LAZY)
__getattr__ = lazy_getattr(__name__, _LAZY)
