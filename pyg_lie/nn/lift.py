r"""Lifting a point cloud on a homogeneous space to a set of group elements.

The LieTransformer (Hutchinson et al., 2021, Sec. 3.1) maps every input pair
``(x_i, f_i)`` to the pairs ``{(g, f_i) : g in s(x_i) \hat H}`` where ``s`` is
a section (``s(x) . o = x`` for the origin ``o``) and ``\hat H`` a finite
subset of the stabiliser ``H`` of ``o``. Since ``s(u x) H = u s(x) H`` the
lifted *set* moves with the input: lifting is equivariant.

Two choices of ``\hat H``:

* ``"haar"``: ``K`` independent Haar samples of ``H`` per point (a Monte-Carlo
  estimate of the integral over ``H``; equivariance holds in expectation).
  Resampled at every forward pass in training mode; in evaluation mode drawn
  from a generator seeded with ``seed`` so repeated calls agree.
* ``"finite"``: a finite subgroup of ``H`` (``C_K`` rotations for SE(2) and
  SO(3), a rotation group ``T``/``O``/``I`` or ``C_K`` for SE(3)). The lifted
  set is then exactly ``u``-translated for every ``u`` whose rotation part lies
  in the subgroup, which makes an invariant model *exactly* invariant to
  ``T(n) x| C_K`` (SE(2)) and the corresponding groups in 3D.
* ``"grid"``: that finite subgroup turned by one Haar sample ``r_i`` per point,
  ``r_i \hat H`` (for SE(2): ``K`` equally spaced angles ``phi_i + 2 pi a / K``,
  the lift of the original LieTransformer code). Equivariant in expectation like
  ``"haar"``, but a stratified sample of ``H``: the invariance error of a model
  falls much faster with ``K`` than with independent samples. Sampled like
  ``"haar"`` (fresh in training mode, from ``seed`` in evaluation mode).

Layout: lifted node ``i * K + a`` is lift ``a`` of point ``i``.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from .. import _checks as checks
from .._checks import positive_int
from ..groups import LieGroup, get_group
from .._tracing import tracing
from ..groups.finite import Cn, FiniteGroup, finite_group

__all__ = ["Lift", "LiftedPoints", "finite_subgroup", "check_point_cloud", "LIFT_MODES"]

#: the ways :class:`Lift` chooses the stabiliser elements (module docstring)
LIFT_MODES = ("haar", "finite", "grid")


class LiftedPoints(NamedTuple):
    """Output of :class:`Lift` (``M = N * K`` lifted nodes).

    Attributes:
        x: ``(M, C)`` lifted features (``f_i`` repeated ``K`` times).
        g: ``(M, m, m)`` group elements.
        index: ``(M,)`` index of the original point of every lifted node.
        batch: ``(M,)`` graph of every lifted node.
    """

    x: Tensor
    g: Tensor
    index: Tensor
    batch: Tensor


def check_point_cloud(group: LieGroup, x: Optional[Tensor], pos: Tensor,
                      batch: Optional[Tensor]) -> None:
    """Validate ``x (N, C)``, ``pos (N, n)`` and ``batch (N,)`` for ``group``.

    Raises:
        ValueError: wrong shapes, lengths that disagree, integer ``x`` or ``pos``, a
            dimension ``n`` the group does not act on, non-finite positions, or negative
            graph ids.
    """
    if not isinstance(pos, Tensor) or pos.dim() != 2:
        raise ValueError(f"pos must be a tensor of shape (N, {group.space_dim}), got "
                         f"{tuple(pos.shape) if isinstance(pos, Tensor) else type(pos).__name__}")
    if pos.size(1) != group.space_dim:
        raise ValueError(
            f"pos has {pos.size(1)} coordinates per point but {group.name} acts on R^{group.space_dim}; "
            f"pick a group for dimension {pos.size(1)} (e.g. 'T{pos.size(1)}'"
            f"{', SE2, SO2' if pos.size(1) == 2 else ', SE3, SO3' if pos.size(1) == 3 else ''})")
    checks.floating("pos", pos)
    if x is not None:
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ValueError(f"x must be a tensor of shape (N, C), got "
                             f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}; "
                             f"use x.view(-1, 1) for one feature per point")
        if x.size(0) != pos.size(0):
            raise ValueError(f"x and pos must describe the same points: x has {x.size(0)} rows, "
                             f"pos has {pos.size(0)}")
        checks.floating("x", x)
    if batch is not None:
        checks.batch_vector(batch, pos.size(0), "point")
    if not tracing() and not bool(torch.isfinite(pos).all()):
        raise ValueError("pos contains non-finite entries (NaN or inf); remove or fix those points")


def check_stabilizer(group: LieGroup, h, N: int, K: int) -> None:
    """``h`` must be ``(N, K, m, m)`` elements of the stabiliser ``H`` of the origin: elements of
    ``group`` (:meth:`~pyg_lie.groups.LieGroup.contains`, whose tolerance is relative to the
    dtype of ``h``) that fix the origin to the same tolerance. Read in float64 (one pass, one
    sync; left out while tracing). ``ValueError`` naming ``stabilizer`` otherwise."""
    m = group.matrix_size
    if not isinstance(h, Tensor) or tuple(h.shape) != (N, K, m, m):
        got = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
        raise ValueError(f"stabilizer must have shape (N, K, m, m) = {(N, K, m, m)}, got {got}")
    if not h.is_floating_point():
        raise ValueError(f"stabilizer must be a floating-point tensor, got {h.dtype}")
    if not h.numel() or not checks._reads_values(h):
        return
    tol = torch.finfo(h.dtype).eps ** (1 / 3)
    flat = h.detach().reshape(-1, m, m).to(torch.float64)
    member = group.contains(flat, tol)
    o = group.origin(dtype=torch.float64, device=h.device)
    scale = 1.0 + float(o.abs().max()) if o.numel() else 1.0
    fixes = (group.act(torch.where(member[:, None, None], flat, torch.eye(m, dtype=flat.dtype, device=flat.device)),
                       o.expand(flat.shape[0], -1)) - o).abs().amax(-1) <= tol * scale
    bad = ~(member & fixes)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        what = "is no element of the group" if not bool(member[i]) else "does not fix the origin"
        raise ValueError(f"stabilizer[{i // K}, {i % K}] {what}: stabilizer must hold elements of the stabiliser "
                         f"of the origin of {group.name} (tolerance {tol:.1g} for {h.dtype}), e.g. "
                         f"{group.name}().stabilizer_random(N, K) or stabilizer_embed(subgroup elements)")


def finite_subgroup(group: LieGroup, k: int, dtype: torch.dtype = torch.float64,
                    device=None) -> Tensor:
    """Elements of a finite subgroup of the stabiliser ``H`` with ``k`` elements.

    In the convention of ``group.stabilizer_embed``: ``(k, 2, 2)`` rotations
    ``C_k`` when ``H = SO(2)`` (SE(2), SO(3)); for SE(3) (``H = SO(3)``)
    ``k = 12, 24, 60`` gives the tetrahedral, octahedral and icosahedral
    rotation groups ``(k, 3, 3)`` and any other ``k`` the cyclic group ``C_k``
    about ``e_z``.

    Raises:
        ValueError: for groups with a trivial stabiliser (T(n), SO(2)).
    """
    if group.stabilizer_dim == 0:
        raise ValueError(
            f"{group.name} has a trivial stabiliser, so every point has exactly one lift and a "
            f"finite-subgroup lift is not defined; use lift='haar' with lift_samples=1 "
            f"(the model is then exactly {group.name}-invariant)")
    k = positive_int("the number of finite-subgroup lifts", k)
    cyclic = Cn(k).elements(dtype=torch.float64)
    if group.stabilizer_dim == 1:
        return cyclic.to(dtype=dtype, device=device)
    if group.stabilizer_dim == 3:
        named = {12: "Tetrahedral", 24: "Octahedral", 60: "Icosahedral"}
        if k in named:
            # built in float64: a float32 cast would be a group only to ~1e-8,
            # outside the float64 log-cut tolerance
            return finite_group(named[k]).elements(dtype=dtype, device=device)
        out = torch.zeros(k, 3, 3, dtype=torch.float64)
        out[:, :2, :2] = cyclic
        out[:, 2, 2] = 1.0
        return out.to(dtype=dtype, device=device)
    raise ValueError(f"no finite subgroup known for the stabiliser of {group.name}; pass subgroup=...")


class Lift(torch.nn.Module):
    r"""Lift ``(x, pos, batch)`` to lifted nodes ``(x_l, g, index, batch_l)``.

    For every point ``x_i`` the ``K`` group elements ``s(x_i) h_a``,
    ``h_a in \hat H``, are returned (``K = num_samples``; see the module
    docstring for ``mode="haar"``, ``"finite"`` and ``"grid"``).

    Args:
        group: a :class:`~pyg_lie.groups.LieGroup` or its name (``"SE2"``).
        num_samples: ``K``, lifts per point. Must be 1 for groups with a
            trivial stabiliser (T(n), SO(2)).
        mode: ``"haar"``, ``"finite"`` or ``"grid"``.
        subgroup: optional explicit finite subgroup (``mode="finite"`` or ``"grid"``): a
            :class:`~pyg_lie.groups.finite.FiniteGroup` (``Octahedral()``,
            ``Icosahedral()`` for SE3; ``Cn(k)`` for SE2, SO3) or its ``(K, k, k)``
            elements, in the convention of ``group.stabilizer_embed``; its
            length then overrides ``num_samples``.
        seed: seed of the evaluation-mode generator (``mode="haar"`` and ``"grid"``).

    Shapes:
        input ``x (N, C)`` (or ``None``), ``pos (N, n)``, ``batch (N,)``;
        output :class:`LiftedPoints` with ``M = N K`` rows.
    """

    def __init__(self, group: Union[str, LieGroup], num_samples: int = 1, mode: str = "haar",
                 subgroup: Optional[Tensor] = None, seed: int = 0):
        super().__init__()
        self.group = get_group(group)
        if mode not in LIFT_MODES:
            raise ValueError(f"mode must be one of {LIFT_MODES}, got {mode!r}")
        num_samples = checks.size("num_samples", num_samples)
        trivial = self.group.stabilizer_dim == 0
        if trivial and (num_samples != 1 or subgroup is not None):
            raise ValueError(
                f"{self.group.name} has a trivial stabiliser: each point has exactly one lift, so use "
                f"num_samples=1 and no subgroup (got num_samples={num_samples}"
                f"{'' if subgroup is None else ' and a subgroup'}); the model is then exactly "
                f"{self.group.name}-invariant")
        self.mode = mode
        self.seed = int(seed)
        if isinstance(subgroup, FiniteGroup):
            subgroup = subgroup.elements(torch.float64)
        if mode in ("finite", "grid") and not trivial:
            sub = subgroup if subgroup is not None else finite_subgroup(self.group, num_samples)
            sub = torch.as_tensor(sub, dtype=torch.float64)
            num_samples = sub.size(0)
            # validate once (raises for a wrong convention)
            self.group.stabilizer_embed(sub)
            self.register_buffer("subgroup", sub, persistent=False)
        else:
            if subgroup is not None:
                raise ValueError("subgroup is only used with mode='finite' or 'grid'")
            self.subgroup = None
        self.num_samples = num_samples

    def stabilizer_samples(self, num_points: int, dtype: torch.dtype, device) -> Tensor:
        """``(N, K, m, m)`` stabiliser elements used for the next lift."""
        if self.subgroup is not None:
            h = self.group.stabilizer_embed(self.subgroup.to(dtype=dtype, device=device))
            if self.mode == "grid":  # the subgroup turned by one Haar sample per point
                return self._haar_samples(num_points, dtype, device, 1) @ h.unsqueeze(0)
            return h.unsqueeze(0).expand(num_points, -1, -1, -1)
        return self._haar_samples(num_points, dtype, device, self.num_samples)

    @torch.compiler.disable
    def _haar_samples(self, num_points: int, dtype: torch.dtype, device, k: int) -> Tensor:
        # eager under torch.compile (one graph break): a torch.Generator cannot be created in
        # a graph, and random sampling with a symbolic number of points (dynamic shapes, e.g.
        # clouds of varying size) fails to trace
        gen = None if self.training else torch.Generator().manual_seed(self.seed)
        return self.group.stabilizer_random(num_points, k, generator=gen, dtype=dtype, device=device)

    def forward(self, x: Optional[Tensor], pos: Tensor, batch: Optional[Tensor] = None,
                stabilizer: Optional[Tensor] = None) -> LiftedPoints:
        """Lift the cloud.

        Args:
            x: ``(N, C)`` point features or ``None`` (then ``(N, 0)``).
            pos: ``(N, n)`` positions.
            batch: ``(N,)`` graph ids (``None``: one graph).
            stabilizer: optional fixed ``(N, K, m, m)`` stabiliser elements
                ``h`` (overrides the sampling; used for exact equivariance
                checks of Haar lifts).
        """
        group = self.group
        check_point_cloud(group, x, pos, batch)
        N, K = pos.size(0), self.num_samples
        if batch is None:
            batch = torch.zeros(N, dtype=torch.long, device=pos.device)
        if x is None:
            x = pos.new_zeros(N, 0)
        s = group.section(pos)  # (N, m, m)
        if stabilizer is None:
            h = self.stabilizer_samples(N, pos.dtype, pos.device)
        else:
            check_stabilizer(group, stabilizer, N, K)
            h = stabilizer.to(dtype=pos.dtype, device=pos.device)
        g = (s.unsqueeze(1) @ h).reshape(N * K, group.matrix_size, group.matrix_size)
        index = torch.arange(N, device=pos.device).repeat_interleave(K)
        return LiftedPoints(x.repeat_interleave(K, dim=0), g, index, batch.long().repeat_interleave(K))

    def extra_repr(self) -> str:
        return f"{self.group.name}, num_samples={self.num_samples}, mode={self.mode!r}"
