"""Conversion to and from escnn (``escnn.nn.FieldType`` / ``GeometricTensor``).

escnn is imported lazily (only inside these functions): it is optional, slow to import
and not available on every machine. Conventions agree with ours: escnn's dihedral
element ``(f, k)`` is ``r^k t^f``, its irrep ``(j, k)`` is our ``A1 (0,0)``, ``A2 (1,0)``,
``B1 (0,n/2)``, ``B2 (1,n/2)``, ``E_k (1,k)``; the cyclic irrep ``k`` is our ``A``, ``B``
or ``E_k`` (tested element by element in ``tests/test_vit_escnn.py``).

Spatial frames differ: escnn's x-axis is the row axis of the array, i.e. its pixel
frame is ours rotated by 90 degrees. Rotations agree, but escnn's reflection ``(1, 0)``
acts on the array as our ``r^{n/2} t``. For tensors on a pixel/patch grid the
fibres are therefore expressed in escnn's frame by ``rho_V(r^{n/4})`` (dihedral groups
with ``4 | n``; cyclic groups need no change), which makes our layers equivariant
under escnn's own ``GeometricTensor.transform`` (tested).

An escnn field type made of arbitrary representations (e.g. regular or quotient
representations) is converted with the change of basis ``rho = Q (+ irreps) Q^{-1}``
of each field: ``x_ours = T x_escnn`` with an orthogonal ``T``.
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from .field_type import FieldType
from .irreps import FiniteO2Group, Irrep, get_group

__all__ = ["escnn_group", "escnn_gspace", "escnn_irrep_id", "escnn_element", "to_escnn_type", "from_escnn_type",
           "to_geometric_tensor", "from_geometric_tensor"]


def _check(G: FiniteO2Group) -> None:
    if G.dihedral and G.n == 1:
        raise ValueError("group: D1 has no matching escnn gspace convention here; use D2 or C2")


def escnn_group(G: Union[str, FiniteO2Group]):
    """The escnn ``cyclic_group(n)`` / ``dihedral_group(n)``."""
    from escnn import group as egroup
    G = get_group(G) if isinstance(G, str) else G
    _check(G)
    return egroup.dihedral_group(G.n) if G.dihedral else egroup.cyclic_group(G.n)


def escnn_gspace(G: Union[str, FiniteO2Group]):
    """``flipRot2dOnR2(N=n)`` for ``D_n`` and ``rot2dOnR2(N=n)`` for ``C_n``."""
    from escnn import gspaces
    G = get_group(G) if isinstance(G, str) else G
    _check(G)
    return gspaces.flipRot2dOnR2(N=G.n) if G.dihedral else gspaces.rot2dOnR2(N=G.n)


def escnn_irrep_id(rho: Irrep):
    """escnn id of one of our irreps: ``(flip, freq)`` (dihedral) or ``(freq,)`` (cyclic)."""
    return (rho.flip, rho.freq) if rho.dihedral else (rho.freq,)


def escnn_element(eG, G: FiniteO2Group, g: int):
    f, k = G.elements[g]
    return eG.element((f, k)) if G.dihedral else eG.element(k)


def to_escnn_type(V: FieldType, gspace=None):
    """``escnn.nn.FieldType`` with one irrep field per channel, in our flat layout order
    (so tensors need no change of basis: ``x`` of shape ``(B, V.dim, ...)`` is valid)."""
    from escnn import nn as enn
    gs = gspace if gspace is not None else escnn_gspace(V.group)
    eG = gs.fibergroup
    reps = []
    for r, C, _ in V.blocks:
        reps += [eG.irrep(*escnn_irrep_id(r))] * C
    return enn.FieldType(gs, reps)


def from_escnn_type(ftype, group: Optional[Union[str, FiniteO2Group]] = None):
    """``(V, T)``: our field type and the ``(V.dim, ftype.size)`` change of basis with
    ``x_ours = T x_escnn`` (features along the channel axis)."""
    eG = ftype.fibergroup
    if group is None:
        name = type(eG).__name__
        group = get_group(("D" if "Dihedral" in name else "C") + str(eG.order() // (2 if "Dihedral" in name else 1)))
    G = get_group(group) if isinstance(group, str) else group
    ids = {escnn_irrep_id(r): r.name for r in G.irreps}
    pieces = []  # (irrep name, rows of Q^{-1} restricted to this irrep, escnn channel offset)
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
    return G.index(0, G.n // 4)


def to_geometric_tensor(x: Tensor, V: FieldType, gspace=None, grid_shape: Optional[tuple] = None):
    """Our features to a ``GeometricTensor`` (fibres in escnn's frame for spatial input).

    Args:
        x: ``(B, V.dim)``, ``(B, V.dim, H, W)``, or patch tokens ``(B, q*q, V.dim)`` of a
            :class:`~pyg_lie.vit.patch_embed.SquareGrid` (row-major patches; pass
            ``grid_shape=(q, q)``), which become ``(B, V.dim, q, q)``.
    """
    from escnn import nn as enn
    ftype = to_escnn_type(V, gspace)
    if grid_shape is not None or x.dim() == 4:
        s = _frame_element(V)
        if grid_shape is not None:
            x = x.transpose(1, 2).reshape(x.shape[0], V.dim, *grid_shape)
        if s is not None:
            x = V.transform(x.movedim(1, -1), s).movedim(-1, 1)
    elif x.dim() == 2:
        x = x[:, :, None, None]
    return enn.GeometricTensor(x, ftype)


def from_geometric_tensor(gt, group: Optional[Union[str, FiniteO2Group]] = None, tokens: bool = False):
    """``GeometricTensor`` (any representations) to ``(x, V)`` in our layout: ``x`` of
    shape ``(B, V.dim, H, W)`` or, with ``tokens=True``, ``(B, H*W, V.dim)``."""
    V, T = from_escnn_type(gt.type, group)
    t = gt.tensor
    Tt = torch.as_tensor(T, dtype=t.dtype, device=t.device)
    x = torch.einsum("oc,bc...->bo...", Tt, t)
    if x.dim() == 4 and gt.type.gspace.fibergroup.order() > 1:
        s = _frame_element(V)
        if s is not None:
            x = V.transform(x.movedim(1, -1), V.group.inv(s)).movedim(-1, 1)
    if tokens:
        x = x.flatten(2).transpose(1, 2)
    return x, V
