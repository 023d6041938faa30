"""escnn field types and geometric tensors to and from :mod:`pyg_lie.vit`.

escnn is imported lazily (only inside these functions): it is optional and slow to import.
Element and irrep conventions agree with ours: escnn's dihedral element ``(f, k)`` is
``r^k t^f``, its irrep ``(j, k)`` is our ``A1 (0,0)``, ``A2 (1,0)``, ``B1 (0,n/2)``,
``B2 (1,n/2)``, ``E_k (1,k)``; the cyclic irrep ``k`` is our ``A``, ``B`` or ``E_k``.

Spatial frames differ: escnn's x-axis is the row axis of the array, i.e. its pixel frame is
ours rotated by 90 degrees. Rotations agree, but escnn's reflection ``(1, 0)`` acts on the
array as our ``r^{n/2} t``. For tensors on a pixel or patch grid the fibres are therefore
expressed in escnn's frame by ``rho_V(r^{n/4})`` (dihedral groups with ``4 | n``; cyclic
groups need no change), which makes our layers equivariant under escnn's own
``GeometricTensor.transform``.

An escnn field type made of arbitrary representations (regular, quotient, irreps, ...) is
converted with the change of basis ``rho = Q (+ irreps) Q^{-1}`` of each field:
``x_ours = T x_escnn`` with an orthogonal ``T``.

The gspaces that match our groups are ``rot2dOnR2(N=n)`` for ``C_n`` and
``flipRot2dOnR2(N=n)`` (its default reflection axis) for ``D_n``; see :func:`escnn_gspace`.
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..vit.field_type import FieldType
from ..groups.finite import FiniteO2Group, Irrep, o2_group

__all__ = ["escnn_group", "escnn_gspace", "escnn_irrep_id", "escnn_element", "to_escnn_type", "from_escnn_type",
           "spatial_change_of_basis", "check_gspace", "to_geometric_tensor", "from_geometric_tensor"]


def _check(G: FiniteO2Group) -> None:
    if G.dihedral and G.n == 1:
        raise ValueError("group: D1 has no matching escnn gspace convention here; use D2 or C2")


def _group(G: Union[str, FiniteO2Group]) -> FiniteO2Group:
    return o2_group(G)


def escnn_group(G: Union[str, FiniteO2Group]):
    """The escnn ``cyclic_group(n)`` / ``dihedral_group(n)``."""
    from escnn import group as egroup
    G = _group(G)
    _check(G)
    return egroup.dihedral_group(G.n) if G.dihedral else egroup.cyclic_group(G.n)


def escnn_gspace(G: Union[str, FiniteO2Group]):
    """``flipRot2dOnR2(N=n)`` for ``D_n`` and ``rot2dOnR2(N=n)`` for ``C_n``."""
    from escnn import gspaces
    G = _group(G)
    _check(G)
    return gspaces.flipRot2dOnR2(N=G.n) if G.dihedral else gspaces.rot2dOnR2(N=G.n)


def escnn_irrep_id(rho: Irrep):
    """escnn id of one of our irreps: ``(flip, freq)`` (dihedral) or ``(freq,)`` (cyclic)."""
    return (rho.flip, rho.freq) if rho.dihedral else (rho.freq,)


def escnn_element(eG, G: FiniteO2Group, g: int):
    """The escnn element of ``eG`` (``escnn_group(G)``) equal to our element index ``g``."""
    f, k = G.pairs[g]
    return eG.element((f, k)) if G.dihedral else eG.element(k)


def _gspace_name(G: FiniteO2Group) -> str:
    return f"gspaces.flipRot2dOnR2(N={G.n})" if G.dihedral else f"gspaces.rot2dOnR2(N={G.n})"


def check_gspace(ftype, group: Union[str, FiniteO2Group], name: str = "in_type") -> None:
    """Raise ``TypeError`` unless ``ftype`` is an ``escnn.nn.FieldType`` and ``ValueError``
    unless its gspace is the one of ``group`` (:func:`escnn_gspace`): the same subgroup of
    O(2) with the same reflection axis."""
    from escnn import nn as enn
    G = _group(group)
    if not isinstance(ftype, enn.FieldType):
        raise TypeError(f"{name}: expected an escnn.nn.FieldType, got {type(ftype).__name__}")
    ours = escnn_gspace(G)
    if ftype.gspace != ours:
        hint = " (or build the model with the group of that gspace)" if name == "in_type" else ""
        raise ValueError(f"{name}: its gspace {ftype.gspace.name} is not the gspace of {G.name}; build the "
                         f"field type on {_gspace_name(G)}{hint}")


def to_escnn_type(V: FieldType, gspace=None, regular: bool = False):
    """The ``escnn.nn.FieldType`` of features of type ``V``.

    By default one irrep field per channel in our flat layout order, so tensors need no change
    of basis (``x`` of shape ``(B, V.dim, ...)`` is valid). With ``regular=True`` a type
    ``V = FieldType.regular(G, c)`` becomes ``c`` copies of escnn's ``regular_repr``, the fields
    escnn's pointwise nonlinearities and ``GroupPooling`` accept; :func:`to_geometric_tensor`
    with ``field_type=`` applies the change of basis.
    """
    from escnn import nn as enn
    gs = gspace if gspace is not None else escnn_gspace(V.group)
    if regular:
        c = V.mult[V.group.irreps[0].name]
        if V != FieldType.regular(V.group, c):
            raise ValueError(f"regular: {V} is not a sum of regular representations; use regular=False")
        return enn.FieldType(gs, [gs.regular_repr] * c)
    eG = gs.fibergroup
    reps = []
    for r, C, _ in V.blocks:
        reps += [eG.irrep(*escnn_irrep_id(r))] * C
    return enn.FieldType(gs, reps)


def _infer_group(ftype) -> FiniteO2Group:
    eG = ftype.fibergroup
    name = type(eG).__name__
    if name not in ("CyclicGroup", "DihedralGroup"):
        raise ValueError(f"field type: its group {eG} is not a finite cyclic or dihedral group")
    dihedral = name == "DihedralGroup"
    return o2_group(("D" if dihedral else "C") + str(eG.order() // (2 if dihedral else 1)))


def from_escnn_type(ftype, group: Optional[Union[str, FiniteO2Group]] = None):
    """``(V, T)``: our field type and the ``(V.dim, ftype.size)`` change of basis with
    ``x_ours = T x_escnn`` (features along the channel axis; ``T`` is orthogonal)."""
    G = _infer_group(ftype) if group is None else _group(group)
    ids = {escnn_irrep_id(r): r.name for r in G.irreps}
    pieces = []  # (irrep name, rows of Q^{-1} restricted to this irrep)
    off = 0
    for rep in ftype.representations:
        Qinv = np.asarray(rep.change_of_basis_inv)
        p = 0
        for irr_id in rep.irreps:
            name = ids[tuple(irr_id)]
            d = G.irrep(name).dim
            rows = np.zeros((d, ftype.size))
            rows[:, off: off + rep.size] = Qinv[p: p + d]
            pieces.append((name, rows))
            p += d
        off += rep.size
    V = FieldType(G, {r.name: sum(1 for n, _ in pieces if n == r.name) for r in G.irreps})
    T = np.concatenate([rows for r in G.irreps for n, rows in pieces if n == r.name], 0)
    return V, T


def _frame_element(V: FieldType) -> Optional[int]:
    G = V.group
    if not G.dihedral:
        return None
    if G.n % 4:
        raise ValueError(f"group: spatial conversion for {G.name} needs n divisible by 4 (escnn's frame is "
                         "rotated by 90 degrees); use a cyclic group or D4")
    return G.pair_index(0, G.n // 4)


def spatial_change_of_basis(ftype, group: Optional[Union[str, FiniteO2Group]] = None):
    """``(V, M)``: our field type and the orthogonal ``(V.dim, ftype.size)`` float64 matrix
    with ``x_ours = M x_escnn`` for fields on a pixel grid (the change of basis of
    :func:`from_escnn_type` followed by the change of frame); ``x_escnn = M^T x_ours``."""
    V, T = from_escnn_type(ftype, group)
    s = _frame_element(V)
    if s is not None:
        T = V.representation(V.group.inv(s)) @ T
    return V, T


def to_geometric_tensor(x: Tensor, V: FieldType, gspace=None, grid_shape: Optional[tuple] = None, field_type=None):
    """Our features to a ``GeometricTensor`` (fibres in escnn's frame for spatial input).

    Args:
        x: ``(B, V.dim)``, ``(B, V.dim, H, W)``, or patch tokens ``(B, q*q, V.dim)`` of a
            :class:`~pyg_lie.vit.patch_embed.SquareGrid` (row-major patches; pass
            ``grid_shape=(q, q)``), which become ``(B, V.dim, q, q)``.
        V: the field type of ``x``.
        gspace: the escnn gspace (default :func:`escnn_gspace` of ``V.group``).
        field_type: an escnn type equivalent to ``V`` (for example
            ``to_escnn_type(V, regular=True)``) to express the result in; default: one irrep
            field per channel (:func:`to_escnn_type`).
    """
    from escnn import nn as enn
    if not isinstance(x, Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    spatial = grid_shape is not None or x.dim() == 4
    if grid_shape is not None:
        if x.dim() != 3 or x.shape[-1] != V.dim or x.shape[1] != int(np.prod(grid_shape)):
            raise ValueError(f"x: patch tokens must have shape (B, {int(np.prod(grid_shape))}, {V.dim}) for "
                             f"grid_shape={tuple(grid_shape)}, got {tuple(x.shape)}")
        x = x.transpose(1, 2).reshape(x.shape[0], V.dim, *grid_shape)
    elif x.dim() == 2:
        x = x[:, :, None, None]
    elif x.dim() != 4:
        raise ValueError(f"x: expected (B, {V.dim}), (B, {V.dim}, H, W) or patch tokens with grid_shape, "
                         f"got {tuple(x.shape)}")
    if x.shape[1] != V.dim:
        raise ValueError(f"x: expected {V.dim} channels for {V}, got {x.shape[1]}")
    if field_type is None:
        ftype = to_escnn_type(V, gspace)
        M = np.eye(V.dim)
    else:
        if gspace is not None and field_type.gspace != gspace:
            raise ValueError("field_type: its gspace differs from gspace")
        check_gspace(field_type, V.group, "field_type")
        ftype = field_type
        V2, M = from_escnn_type(field_type, V.group)
        if V2 != V:
            raise ValueError(f"field_type: it converts to {V2}, not to {V}")
    if spatial:
        s = _frame_element(V)
        if s is not None:
            M = V.representation(V.group.inv(s)) @ M
    if not np.allclose(M, np.eye(V.dim)):
        x = torch.einsum("oc,bo...->bc...", torch.as_tensor(M, dtype=x.dtype, device=x.device), x)
    return enn.GeometricTensor(x, ftype)


def from_geometric_tensor(gt, group: Optional[Union[str, FiniteO2Group]] = None, tokens: bool = False):
    """``GeometricTensor`` (any representations) to ``(x, V)`` in our layout: ``x`` of
    shape ``(B, V.dim, H, W)`` or, with ``tokens=True``, ``(B, H*W, V.dim)``."""
    V, T = from_escnn_type(gt.type, group)
    t = gt.tensor
    if t.dim() == 4 and gt.type.gspace.fibergroup.order() > 1:
        s = _frame_element(V)
        if s is not None:
            T = V.representation(V.group.inv(s)) @ T
    Tt = torch.as_tensor(T, dtype=t.dtype, device=t.device)
    x = torch.einsum("oc,bc...->bo...", Tt, t)
    if tokens:
        x = x.flatten(2).transpose(1, 2)
    return x, V
