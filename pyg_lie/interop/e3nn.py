r"""Bridge to `e3nn <https://e3nn.org>`_: irreps features in and out of the SO(3) / SE(3) models.

e3nn types a feature vector by an :class:`e3nn.o3.Irreps` (``"8x0e + 4x1o + 2x2e"``):
a rotation ``R`` acts on it by the block-diagonal Wigner matrix ``D(R)``. The
LieTransformer works on lifted nodes ``g_k`` (group elements), whose rotation part
``R_k`` is a frame. This module moves irreps features between the global frame and
those frames:

* :func:`wigner_D` -- ``D(R)`` for rotation matrices (or the rotation part of SE(3)
  elements), equal to ``Irreps(irreps).D_from_matrix(R)``;
* :func:`rotate_irreps` -- ``D(R) x`` or ``D(R)^{-1} x`` without building the
  block-diagonal matrix;
* :class:`IrrepsLift` -- a :class:`~pyg_lie.nn.Lift` whose lifted features are the
  point's irreps seen in each lift's frame, ``x_k = D(R_k)^{-1} x_i`` (invariant:
  a global rotation moves the frame and the feature alike);
* :class:`IrrepsPool` -- irreps features computed in the frames, brought back to
  the global frame and averaged, ``mean_k D(R_k) y_k`` per graph (or per point);
* :func:`to_axis_angle` / :func:`from_axis_angle` -- e3nn's axis-angle convention.

**The sqrt(2) convention.** pyg_lie writes algebra elements in a basis that is
orthonormal for the Frobenius product; for SO(3) that is ``L_x, L_y, L_z`` divided
by ``sqrt(2)``. Hence ``SO3().log(R) = sqrt(2) * angle * axis``: sqrt(2) times e3nn's
rotation vector (``axis * angle`` of :func:`e3nn.o3.matrix_to_axis_angle`). For
SE(3) the same holds for the rotation coordinates ``SE3().log(g)[..., 3:]``.

Parity: the groups here hold proper rotations only, for which ``D`` of ``1o`` and
``1e`` (and of every pair ``le`` / ``lo``) coincide; :func:`wigner_D` also accepts
improper orthogonal matrices and then applies e3nn's parity factor ``p^k``, as
``D_from_matrix`` does. The models are SE(3)- (not E(3)-) equivariant.
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Tuple, Union

import torch
from e3nn import o3
from torch import Tensor

from .. import _checks as checks
from ..groups import LieGroup
from .._tracing import tracing
from ..groups.so3 import SO3
from ..nn.group_pool import GroupPool
from ..nn.lift import Lift, LiftedPoints

__all__ = ["as_irreps", "wigner_D", "rotate_irreps", "to_axis_angle", "from_axis_angle",
           "IrrepsLift", "IrrepsPool", "ROTATION_GROUPS", "SQRT2"]

SQRT2 = math.sqrt(2.0)
#: groups whose elements have a rotation part that irreps features can follow
ROTATION_GROUPS = ("SO3", "SE3")

IrrepsLike = Union[str, "o3.Irreps", "o3.Irrep"]


def as_irreps(irreps: IrrepsLike, name: str = "irreps") -> o3.Irreps:
    """``irreps`` as an :class:`e3nn.o3.Irreps` (from a string, an ``Irreps`` or an ``Irrep``).

    Raises:
        TypeError: for anything else (a number, a tensor).
        ValueError: for a string e3nn cannot parse.
    """
    if isinstance(irreps, o3.Irreps):
        return irreps
    if isinstance(irreps, o3.Irrep):
        return o3.Irreps(irreps)
    if not isinstance(irreps, str):
        raise TypeError(f"{name} must be an e3nn Irreps or a string such as '8x0e + 4x1o + 2x2e', "
                        f"got {type(irreps).__name__}")
    try:
        return o3.Irreps(irreps)
    except Exception as err:  # e3nn raises ValueError or AssertionError
        raise ValueError(f"{name} must be an e3nn irreps string such as '8x0e + 4x1o + 2x2e', "
                         f"got {irreps!r} ({err})") from err


def check_rotation_group(group: LieGroup, what: str) -> None:
    """Irreps features need a group whose elements have a rotation of R^3 as their part."""
    if group.name not in ROTATION_GROUPS:
        raise ValueError(f"{what} needs a group of rotations of R^3 ('SO3' or 'SE3') to carry e3nn "
                         f"irreps, got {group.name}; use one of those groups or plain in/out channels")


def _orthogonality_tol(dtype: torch.dtype) -> float:
    return 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


def rotation_part(R: Tensor, name: str = "R", proper: bool = False, check: bool = True) -> Tensor:
    """The ``(..., 3, 3)`` rotations of ``R``: SO(3) elements as they are, the top-left
    block of SE(3) elements ``(..., 4, 4)``.

    Raises:
        ValueError: another shape, integer or non-finite entries, a matrix that is not
            orthogonal (to ``1e-4``), or (``proper=True``) one with ``det < 0``.
    """
    if not isinstance(R, Tensor) or R.dim() < 2 or R.shape[-2:] not in ((3, 3), (4, 4)):
        got = tuple(R.shape) if isinstance(R, Tensor) else type(R).__name__
        raise ValueError(f"{name} must hold rotation matrices (..., 3, 3) or SE(3) elements (..., 4, 4), "
                         f"got {got}")
    checks.floating(name, R)
    R = R[..., :3, :3]
    if check and not tracing() and R.numel():
        if not bool(torch.isfinite(R).all()):
            raise ValueError(f"{name} contains non-finite entries (NaN or inf)")
        eye = torch.eye(3, dtype=R.dtype, device=R.device)
        Rd = R.detach()
        err = float((Rd.transpose(-1, -2) @ Rd - eye).abs().max())
        if err > _orthogonality_tol(R.dtype):
            raise ValueError(f"{name} must be orthogonal (rotation matrices), but R^T R differs from the "
                             f"identity by {err:.3g}")
        if proper and not bool((torch.linalg.det(Rd) > 0).all()):
            raise ValueError(f"{name} contains matrices with det < 0 (reflections); only rotations "
                             f"have an axis and an angle")
    return R


@functools.lru_cache(maxsize=None)
def _generators64(l: int) -> Tensor:
    """e3nn's ``so3_generators(l)`` in float64: ``D^l(exp([w]_x)) = exp(sum_k w_k X_k)``."""
    # e3nn builds them in the default dtype: float32 entries would cost 7 digits
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            return o3.so3_generators(l).to(torch.float64)
    finally:
        torch.set_default_dtype(previous)


def _blocks(ls, R: Tensor) -> dict:
    """``{l: D^l(R) (..., 2l+1, 2l+1)}`` for proper rotations ``R (..., 3, 3)``.

    ``D^0 = 1``, ``D^1 = R`` (e3nn's ``l = 1`` basis is ``x, y, z``), and for ``l >= 2``
    ``exp(sum_k w_k X^l_k)`` with the rotation vector ``w`` from the quaternion log:
    accurate at every angle (no Euler-angle singularity) and differentiable.
    """
    out = {}
    omega = None
    for l in sorted(set(ls)):
        if l == 0:
            out[0] = torch.ones(*R.shape[:-2], 1, 1, dtype=R.dtype, device=R.device)
        elif l == 1:
            out[1] = R
        else:
            if omega is None:
                omega = SO3.log_rotvec(R)
            X = _generators64(l).to(dtype=R.dtype, device=R.device)
            out[l] = torch.linalg.matrix_exp(torch.einsum("...k,kij->...ij", omega, X))
    return out


def _parity(R: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
    """Proper part ``d R`` and the mask of improper matrices (``None`` when all are proper)."""
    improper = torch.linalg.det(R) < 0
    if not tracing() and not bool(improper.any()):
        return R, None
    return torch.where(improper[..., None, None], -R, R), improper


def wigner_D(irreps: IrrepsLike, R: Tensor) -> Tensor:
    """Block-diagonal representation matrices ``D(R)`` of an e3nn ``Irreps``.

    Equal to ``o3.Irreps(irreps).D_from_matrix(R)`` (same basis, same parity rule), but
    computed from the quaternion log of ``R``, so it stays accurate where e3nn's Euler
    angles are singular (rotations fixing ``e_y``) and has finite gradients there.

    Args:
        irreps: an :class:`e3nn.o3.Irreps`, an ``Irrep`` or a string (``"1o + 2e"``).
        R: rotations ``(..., 3, 3)`` (``SO3`` elements) or ``SE3`` elements
            ``(..., 4, 4)`` (their rotation part is used); improper orthogonal
            matrices get e3nn's parity factor.

    Returns:
        ``(..., dim, dim)`` with ``dim = irreps.dim``, in the dtype of ``R``.
    """
    irreps = as_irreps(irreps)
    R = rotation_part(R)
    Rp, improper = _parity(R)
    blocks = _blocks([ir.l for _, ir in irreps], Rp)
    out = R.new_zeros(*R.shape[:-2], irreps.dim, irreps.dim)
    for (mul, ir), s in zip(irreps, irreps.slices()):
        D = blocks[ir.l]
        if improper is not None and ir.p == -1:
            D = torch.where(improper[..., None, None], -D, D)
        d = ir.dim
        for m in range(mul):
            a = s.start + m * d
            out[..., a:a + d, a:a + d] = D
    return out


def rotate_irreps(irreps: IrrepsLike, x: Tensor, R: Tensor, inverse: bool = False) -> Tensor:
    """``D(R) x`` (or ``D(R)^{-1} x = D(R)^T x`` with ``inverse=True``) per row.

    Applies one ``(2l+1) x (2l+1)`` block per irrep instead of the ``dim x dim`` matrix
    of :func:`wigner_D`.

    Args:
        irreps: the type of ``x``.
        x: ``(..., irreps.dim)`` features.
        R: ``(..., 3, 3)`` rotations or ``(..., 4, 4)`` SE(3) elements, broadcastable
            against ``x``'s leading dimensions.

    Returns:
        ``(..., irreps.dim)``, in the dtype of ``x``.
    """
    irreps = as_irreps(irreps)
    if not isinstance(x, Tensor) or x.dim() < 1 or x.shape[-1] != irreps.dim:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must have a last dimension of {irreps.dim} (the dimension of {irreps}), got {got}")
    checks.floating("x", x)
    return _rotate(irreps, x, rotation_part(R), inverse)


def _rotate(irreps: o3.Irreps, x: Tensor, R: Tensor, inverse: bool) -> Tensor:
    """:func:`rotate_irreps` without argument checks (``R`` already ``(..., 3, 3)``)."""
    Rp, improper = _parity(R)
    blocks = _blocks([ir.l for mul, ir in irreps if mul > 0], Rp)
    lead = torch.broadcast_shapes(x.shape[:-1], R.shape[:-2])
    x = x.expand(*lead, x.shape[-1])
    parts = []
    eq = "...ji,...mj->...mi" if inverse else "...ij,...mj->...mi"
    for (mul, ir), s in zip(irreps, irreps.slices()):
        if mul == 0:
            continue
        xs = x[..., s].reshape(*lead, mul, ir.dim)
        D = blocks[ir.l].to(x.dtype)
        y = torch.einsum(eq, D, xs)
        if improper is not None and ir.p == -1:
            y = torch.where(improper[..., None, None], -y, y)
        parts.append(y.reshape(*lead, mul * ir.dim))
    if not parts:
        return x.new_zeros(*lead, 0)
    return torch.cat(parts, -1)


# --------------------------------------------------------------- axis-angle
def to_axis_angle(g: Tensor) -> Tuple[Tensor, Tensor]:
    """e3nn's axis-angle of rotations: ``(axis (..., 3), angle (...))``, ``angle in [0, pi]``.

    The convention of :func:`e3nn.o3.matrix_to_axis_angle` (unit axis, zero axis at
    angle 0), computed from the quaternion log, so accurate near 0 and pi (where the
    trace formula loses digits and the antisymmetric part vanishes) and differentiable.
    ``axis * angle`` is e3nn's rotation vector, ``SO3().log(g) / sqrt(2)``.

    Args:
        g: ``SO3`` elements ``(..., 3, 3)`` or ``SE3`` elements ``(..., 4, 4)`` (the
            rotation part).
    """
    R = rotation_part(g, "g", proper=True)
    omega = SO3.log_rotvec(R)
    t2 = (omega * omega).sum(-1)
    zero = t2 == 0
    safe = torch.where(zero, torch.ones_like(t2), t2).sqrt()
    angle = torch.where(zero, torch.zeros_like(t2), safe)
    axis = torch.where(zero[..., None], torch.zeros_like(omega), omega / safe[..., None])
    return axis, angle


def from_axis_angle(v: Tensor, angle: Optional[Tensor] = None) -> Tensor:
    """pyg_lie's SO(3) log coordinates ``xi (..., 3)`` of an e3nn axis-angle.

    ``xi = sqrt(2) * angle * axis / |axis|`` (the Frobenius-orthonormal basis, see the
    module docstring), so ``SO3().exp(xi)`` equals ``o3.axis_angle_to_matrix(axis, angle)``;
    for SE(3) these are the rotation coordinates ``xi[..., 3:]``.

    Args:
        v: the axis ``(..., 3)`` (normalised here, as e3nn does) when ``angle`` is given,
            else e3nn's rotation vector ``axis * angle``.
        angle: ``(...)`` angles in radians, or ``None``.
    """
    if not isinstance(v, Tensor) or v.dim() < 1 or v.shape[-1] != 3:
        got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
        raise ValueError(f"v must have shape (..., 3) (an axis, or an axis * angle rotation vector), got {got}")
    checks.floating("v", v)
    if angle is None:
        return SQRT2 * v
    if not isinstance(angle, Tensor):
        angle = torch.as_tensor(angle, dtype=v.dtype, device=v.device)
    checks.floating("angle", angle)
    axis = torch.nn.functional.normalize(v, dim=-1)
    return SQRT2 * angle.unsqueeze(-1) * axis


# ----------------------------------------------------------------- modules
class IrrepsLift(Lift):
    r"""A :class:`~pyg_lie.nn.Lift` for points carrying e3nn irreps features.

    Lift ``k`` of point ``i`` is ``g_k = s(x_i) h_k`` with rotation part ``R_k``; its
    feature is the point's feature seen in that frame,

    .. math:: x_k = D(R_k)^{-1} x_i .

    Under a global motion ``u`` (rotation ``R_u``) the lifts move to ``u g_k`` and the
    features to ``D(R_u) x_i``, so ``x_k`` is unchanged: the lifted features are
    invariant and any :class:`~pyg_lie.nn.LieSelfAttention` stack may consume them.

    Args:
        irreps: type of the point features (e3nn ``Irreps`` or string).
        group: ``"SO3"`` or ``"SE3"`` (or the group object).
        num_samples, mode, subgroup, seed: as for :class:`~pyg_lie.nn.Lift`.

    Shapes:
        ``x (N, irreps.dim)``, ``pos (N, 3)``, ``batch (N,)`` -> :class:`LiftedPoints`
        with ``x (N K, irreps.dim)``.
    """

    def __init__(self, irreps: IrrepsLike, group: Union[str, LieGroup] = "SE3", num_samples: int = 1,
                 mode: str = "haar", subgroup=None, seed: int = 0):
        super().__init__(group, num_samples, mode=mode, subgroup=subgroup, seed=seed)
        check_rotation_group(self.group, "IrrepsLift")
        self.irreps = as_irreps(irreps)

    def forward(self, x: Tensor, pos: Tensor, batch: Optional[Tensor] = None,
                stabilizer: Optional[Tensor] = None) -> LiftedPoints:
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != self.irreps.dim:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (N, {self.irreps.dim}) for irreps {self.irreps}, got {got}")
        lifted = super().forward(x, pos, batch, stabilizer)
        R = lifted.g[..., :3, :3]
        return lifted._replace(x=_rotate(self.irreps, lifted.x, R, inverse=True))

    def extra_repr(self) -> str:
        return f"{self.irreps}, {super().extra_repr()}"


class IrrepsPool(torch.nn.Module):
    r"""Pool features computed in the lifts' frames back to e3nn irreps in the global frame.

    .. math:: y_b = \operatorname{mean}_{k \in b} D(R_k)\, y_k

    per graph ``b`` (``batch`` = the lifted nodes' graph ids), or per point with
    ``batch = lifted.index`` and ``size = N``. If every ``y_k`` is a function of the
    lifted graph that moves with it (an invariant feature of a lifted node), the
    result rotates with the input: ``y_b -> D(R_u) y_b``.

    Args:
        irreps: type of the output.
        reduce: ``"mean"`` or ``"sum"`` (a maximum is not equivariant for ``l > 0``).

    Shapes:
        ``y (M, irreps.dim)``, ``g (M, 3, 3)`` or ``(M, 4, 4)``, ``batch (M,)`` or
        ``None`` -> ``(B, irreps.dim)``.
    """

    def __init__(self, irreps: IrrepsLike, reduce: str = "mean"):
        super().__init__()
        if reduce not in ("mean", "sum"):
            raise ValueError(f"reduce must be 'mean' or 'sum' (a maximum is not equivariant), got {reduce!r}")
        self.irreps = as_irreps(irreps)
        self.reduce = reduce
        self.group_pool = GroupPool(reduce)  # the pooling itself, after rotating back

    def forward(self, y: Tensor, g: Tensor, batch: Optional[Tensor] = None,
                size: Optional[int] = None) -> Tensor:
        if not isinstance(y, Tensor) or y.dim() != 2 or y.shape[1] != self.irreps.dim:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(f"y must have shape (M, {self.irreps.dim}) for irreps {self.irreps}, got {got}")
        checks.floating("y", y)
        R = rotation_part(g, "g")
        if R.shape[:-2] != y.shape[:1]:
            raise ValueError(f"g must hold one element per row of y ({y.shape[0]}), got {tuple(g.shape)}")
        return self.group_pool(_rotate(self.irreps, y, R, inverse=False), batch, size)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.irreps}, reduce={self.reduce!r})"
