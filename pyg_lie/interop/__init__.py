"""Bridges to the equivariant ecosystem: e3nn irreps (:mod:`pyg_lie.interop.e3nn`) and escnn
field types (:mod:`pyg_lie.interop.escnn`). Each submodule imports its library on first use,
so importing :mod:`pyg_lie.interop` costs nothing."""
from .._lazy import lazy_getattr

_LAZY = {
    **{name: "pyg_lie.interop.e3nn" for name in (
        "wigner_D", "rotate_irreps", "to_axis_angle", "from_axis_angle", "IrrepsLift", "IrrepsPool")},
    **{name: "pyg_lie.interop.escnn" for name in (
        "escnn_group", "escnn_gspace", "escnn_element", "escnn_irrep_id", "to_escnn_type", "from_escnn_type",
        "spatial_change_of_basis", "check_gspace", "to_geometric_tensor", "from_geometric_tensor")},
}
__all__ = list(_LAZY)
__getattr__ = lazy_getattr(__name__, _LAZY)
