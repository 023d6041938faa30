"""SO(3): rotations of 3-space (closed-form exp/log, see ``docs/groups/so3_se3.md``)."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .._tracing import tracing
from .base import (CUT_TOL, ROTATION_CHORD, LieGroup, LogNormEmbedding, batch_shape,
                   rot2, skew3)

SQRT2 = math.sqrt(2.0)
_CUT_DIRECTION = (0.3141, 0.5926, 0.7416)  # fixed generic direction deciding the side of the cut

# --------------------------------------------------------------------------
# Even coefficient functions of the rotation angle, written as functions of
# t = theta^2 so that neither values nor first/second derivatives are NaN at
# theta = 0 (the norm |omega| itself is not differentiable there). Near 0 a
# Taylor polynomial in t is used; the closed form is evaluated on a harmless
# dummy (t = 1) there, so the unused branch never produces inf/NaN.
# --------------------------------------------------------------------------

# Taylor coefficients in t = theta^2, up to t^6.
_A_TAYLOR = [1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800, 1 / 6227020800]
_B_TAYLOR = [1 / 2, -1 / 24, 1 / 720, -1 / 40320, 1 / 3628800, -1 / 479001600, 1 / 87178291200]
_C_TAYLOR = [1 / 6, -1 / 120, 1 / 5040, -1 / 362880, 1 / 39916800, -1 / 6227020800,
             1 / 1307674368000]
# (1 - (theta/2) cot(theta/2)) / theta^2 = sum_n |B_2n| / (2n)! t^(n-1)  (Bernoulli numbers)
_D_TAYLOR = [1 / 12, 1 / 720, 1 / 30240, 1 / 1209600, 1 / 47900160, 691 / 1307674368000,
             1 / 74724249600]
# atan(r) / r = sum_n (-r^2)^n / (2n + 1), up to r^10
_ATAN_TAYLOR = [1.0, -1 / 3, 1 / 5, -1 / 7, 1 / 9, -1 / 11]


def _horner(t: Tensor, coeffs) -> Tensor:
    out = torch.full_like(t, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        out = out * t + c
    return out


def _t_small(t: Tensor) -> Tensor:
    # Taylor region for the coefficient functions: theta < 0.5 (float64, truncation
    # error < 1e-16) or theta < 1 (lower precision, truncation error < 1e-12).
    return t < (0.25 if t.dtype == torch.float64 else 1.0)


def _coeff(t: Tensor, taylor, closed) -> Tensor:
    small = _t_small(t)
    ts = torch.where(small, torch.ones_like(t), t)
    return torch.where(small, _horner(t, taylor), closed(ts.sqrt()))


def rot_coeff_a(t: Tensor) -> Tensor:
    """``sin(theta) / theta`` as a function of ``t = theta^2``."""
    return _coeff(t, _A_TAYLOR, lambda th: torch.sin(th) / th)


def rot_coeff_b(t: Tensor) -> Tensor:
    """``(1 - cos(theta)) / theta^2 = sinc(theta/2)^2 / 2`` as a function of ``t = theta^2``."""
    return _coeff(t, _B_TAYLOR, lambda th: 0.5 * (torch.sin(th / 2) / (th / 2)) ** 2)


def rot_coeff_c(t: Tensor) -> Tensor:
    """``(theta - sin(theta)) / theta^3`` as a function of ``t = theta^2``."""
    return _coeff(t, _C_TAYLOR, lambda th: (th - torch.sin(th)) / th ** 3)


def rot_coeff_d(t: Tensor) -> Tensor:
    """``(1 - (theta/2) cot(theta/2)) / theta^2`` as a function of ``t = theta^2`` (finite for theta < 2 pi)."""
    return _coeff(t, _D_TAYLOR,
                  lambda th: (1 - (th / 2) * torch.cos(th / 2) / torch.sin(th / 2)) / (th * th))


def _check_finite(x: Tensor, arg: str) -> None:
    if not tracing() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{arg} contains non-finite entries (NaN or inf)")


# ------------------------------------------------------------ quaternions
def quaternion_to_matrix(q: Tensor) -> Tensor:
    """Rotation matrices ``(..., 3, 3)`` of quaternions ``(..., 4)`` = ``(w, x, y, z)``.

    ``q`` is normalised first, so any non-zero quaternion is accepted.
    """
    q = q / q.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    return torch.stack([
        torch.stack([1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy)], -1),
        torch.stack([2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx)], -1),
        torch.stack([2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy)], -1),
    ], -2)


def matrix_to_quaternion(R: Tensor) -> Tensor:
    """Quaternions ``(w, x, y, z)`` with ``w >= 0`` of rotation matrices ``(..., 3, 3)`` (Shepperd).

    Builds the symmetric matrix ``Q = 4 q q^T`` from sums and differences of
    entries of ``R`` and takes the column ``k`` of its largest diagonal entry:
    ``q = Q[:, k] / (2 sqrt(Q_kk))``. The diagonal of ``Q`` sums to 4, so
    ``Q_kk >= 1`` and the square root and division are always safe (no branch
    is evaluated on bad values). When the rotation angle is exactly ``pi``
    (``w = 0``) the sign is the one Shepperd's column gives: ``q_k > 0`` for the
    axis component ``k`` of the largest diagonal entry ``R_kk``, i.e. of largest
    ``|n_k|`` (first index on ties).
    """
    r00, r01, r02 = R[..., 0, 0], R[..., 0, 1], R[..., 0, 2]
    r10, r11, r12 = R[..., 1, 0], R[..., 1, 1], R[..., 1, 2]
    r20, r21, r22 = R[..., 2, 0], R[..., 2, 1], R[..., 2, 2]
    tr = r00 + r11 + r22
    q00, q11, q22, q33 = 1 + tr, 1 + 2 * r00 - tr, 1 + 2 * r11 - tr, 1 + 2 * r22 - tr
    q01, q02, q03 = r21 - r12, r02 - r20, r10 - r01
    q12, q13, q23 = r01 + r10, r02 + r20, r12 + r21
    Q = torch.stack([
        torch.stack([q00, q01, q02, q03], -1),
        torch.stack([q01, q11, q12, q13], -1),
        torch.stack([q02, q12, q22, q23], -1),
        torch.stack([q03, q13, q23, q33], -1),
    ], -2)  # (..., 4, 4)
    diag = torch.stack([q00, q11, q22, q33], -1)
    k = diag.argmax(-1, keepdim=True)  # (..., 1)
    col = torch.gather(Q, -1, k.unsqueeze(-2).expand(*Q.shape[:-1], 1)).squeeze(-1)  # (..., 4)
    qkk = torch.gather(diag, -1, k)  # (..., 1), >= 1
    q = col / (2 * qkk.sqrt())
    return torch.where(q[..., :1] < 0, -q, q)


def _log_from_quaternion(q: Tensor) -> Tensor:
    """Rotation vector ``omega = 2 atan2(|v|, w) v / |v|`` of quaternions with ``w >= 0``.

    Scale-invariant in ``q``. Near ``v = 0`` the series ``2 atan(r)/r * v / w``,
    ``r = |v| / w``, is used (there ``w >= 1/2``), so gradients are finite.
    """
    w, v = q[..., :1], q[..., 1:]
    s2 = (v * v).sum(-1, keepdim=True)
    eps = 1e-4 if q.dtype == torch.float64 else 1e-2
    small = s2 < eps * w * w
    # Taylor branch (w >= 1/2 here); dummy w = 1 elsewhere
    ws = torch.where(small, w, torch.ones_like(w))
    r2 = s2 / (ws * ws)
    f_small = 2 * _horner(r2, _ATAN_TAYLOR) / ws
    # closed form; dummy s = 1 in the Taylor region
    ss = torch.where(small, torch.ones_like(s2), s2).sqrt()
    f_big = 2 * torch.atan2(ss, w) / ss
    return torch.where(small, f_small, f_big) * v


def rotvec_cut_flip(omega: Tensor) -> tuple[Tensor, Tensor]:
    """The one-sided rule for the cut of the SO(3) log at angle ``pi`` (shared by SO3 and SE3).

    A rotation vector with ``theta = |omega| > pi - CUT_TOL[dtype]`` and
    ``omega . v < 0`` for the fixed generic direction ``v = _CUT_DIRECTION`` is
    replaced by ``omega (theta - 2 pi) / theta``, the same rotation seen from the
    other side of the cut; every other ``omega`` is kept.

    The angle is taken as ``sqrt(|omega|^2)`` only where the flip applies (a dummy
    ``1`` elsewhere), so values and gradients are finite everywhere, including at
    ``omega = 0``; no data-dependent Python branching (``torch.compile``-friendly).

    Args:
        omega: rotation vectors ``(..., 3)``.

    Returns:
        ``(flip, factor)``: the bool mask ``(...)`` of flipped vectors and the
        scale ``(..., 1)`` (``(theta - 2 pi) / theta`` where flipped, else ``1``),
        so that ``omega * factor`` is the one-sided rotation vector.
    """
    t2 = (omega * omega).sum(-1)
    v = torch.tensor(_CUT_DIRECTION, dtype=omega.dtype, device=omega.device)
    bound = math.pi - CUT_TOL.get(omega.dtype, 1e-4)
    flip = (t2 > bound * bound) & ((omega * v).sum(-1) < 0)
    safe = torch.where(flip, t2, torch.ones_like(t2)).sqrt()
    factor = torch.where(flip, (safe - 2 * math.pi) / safe, torch.ones_like(t2))
    return flip, factor.unsqueeze(-1)


class SO3(LieGroup):
    r"""Rotations of ``R^3``, elements ``(..., 3, 3)``.

    Algebra basis ``L_x, L_y, L_z`` divided by ``sqrt(2)`` (orthonormal for the
    Frobenius product); the coordinate of the rotation vector ``omega`` is
    ``xi = sqrt(2) omega``, so ``hat(xi) = [omega]_x``.

    ``exp``: Rodrigues, ``R = I + A [w]_x + B [w]_x^2`` with ``A = sin(theta)/theta``,
    ``B = (1 - cos(theta))/theta^2`` evaluated as functions of ``theta^2``.
    ``log``: principal, ``theta in [0, pi]``, via Shepperd's quaternion and
    ``theta = 2 atan2(|v|, w)``; accurate to rounding up to and at ``theta = pi``.
    At exactly ``pi`` it returns ``pi n`` with the largest ``|n_k|`` positive.

    ``random``: Haar (normalised Gaussian quaternions).

    Homogeneous space ``R^3 \ {0}`` (``S^2`` for unit vectors) with origin
    ``e_z``; ``section(x)`` is the minimal rotation taking ``e_z`` to ``x/|x|``
    (at ``x/|x| = -e_z`` the rotation by ``pi`` about ``e_x``); orbit invariant
    ``|x|``; stabiliser the rotations ``R_z(alpha)`` about ``e_z``.
    """

    name = "SO3"
    matrix_size = 3
    dim = 3
    space_dim = 3
    blocks = {"rotation": slice(0, 3)}
    compact = True

    def basis(self, dtype=torch.float64, device=None) -> Tensor:
        return skew3(torch.eye(3, dtype=dtype, device=device)) / SQRT2

    # -------------------------------------------------------------- exp / log
    def exp(self, xi: Tensor) -> Tensor:
        self._check_vec(xi, "xi")
        _check_finite(xi, "xi")
        return self.exp_rotvec(xi / SQRT2)

    @staticmethod
    def exp_rotvec(omega: Tensor) -> Tensor:
        """Rodrigues' formula for rotation vectors ``omega (..., 3)`` (no input checks)."""
        t = (omega * omega).sum(-1)
        A, B = rot_coeff_a(t), rot_coeff_b(t)
        eye = torch.eye(3, dtype=omega.dtype, device=omega.device)
        outer = omega.unsqueeze(-1) * omega.unsqueeze(-2)
        return ((1 - B * t)[..., None, None] * eye + A[..., None, None] * skew3(omega)
                + B[..., None, None] * outer)

    def log(self, g: Tensor) -> Tensor:
        self._check_mat(g, "g")
        return SQRT2 * self.log_rotvec(g)

    @staticmethod
    def log_rotvec(R: Tensor) -> Tensor:
        """Principal rotation vector ``omega (..., 3)``, ``|omega| <= pi`` (no input checks)."""
        return _log_from_quaternion(matrix_to_quaternion(R))

    def angle(self, g: Tensor) -> Tensor:
        """Rotation angle in ``[0, pi]``, shape ``(...)`` (accurate at both ends)."""
        self._check_mat(g, "g")
        q = matrix_to_quaternion(g)
        return 2 * torch.atan2(q[..., 1:].norm(dim=-1), q[..., 0])

    def to_quaternion(self, g: Tensor) -> Tensor:
        """Unit quaternions ``(w, x, y, z)`` with ``w >= 0``, shape ``(..., 4)``."""
        self._check_mat(g, "g")
        return matrix_to_quaternion(g)

    def from_quaternion(self, q: Tensor) -> Tensor:
        """Rotation matrices of (not necessarily unit) quaternions ``(w, x, y, z)``."""
        if not isinstance(q, Tensor) or q.dim() < 1 or q.shape[-1] != 4:
            raise ValueError(f"q must have trailing dimension 4 (w, x, y, z), got "
                             f"{tuple(q.shape) if isinstance(q, Tensor) else type(q).__name__}")
        return quaternion_to_matrix(q)

    def one_sided_cut(self, xi: Tensor) -> Tensor:
        """``|omega| > pi - tol`` with ``omega . v < 0`` (fixed generic ``v``) becomes
        ``omega (|omega| - 2 pi) / |omega|``: the same rotation, one side of the cut
        (the rule is :func:`rotvec_cut_flip`). ``xi (..., 3) -> (..., 3)``."""
        _, factor = rotvec_cut_flip(xi / SQRT2)  # |xi| = sqrt(2) |omega| in the orthonormal basis
        return xi * factor

    def inv(self, g: Tensor) -> Tensor:
        return g.transpose(-1, -2)

    def random(self, *batch, generator: Optional[torch.Generator] = None,
               dtype=torch.float32, device=None) -> Tensor:
        """Haar-distributed rotations (normalised standard Gaussian quaternions)."""
        shape = batch_shape(*batch)
        q = torch.randn(*shape, 4, generator=generator, dtype=torch.float64)
        return quaternion_to_matrix(q).to(dtype=dtype, device=device)

    # ------------------------------------------------------ homogeneous space
    def log_norm_embedding(self, g: Tensor) -> LogNormEmbedding:
        r"""``e = vec(R)``; ``L = 1``, ``U = pi / 2``.

        ``x = ||R_i - R_j||_F = 2 sqrt(2) sin(theta / 2)`` for the relative angle
        ``theta in [0, pi]`` and ``d = sqrt(2) theta``, so ``d = x asin(s) / s``
        with ``s = x / (2 sqrt(2))`` exactly and ``x <= d <= (pi / 2) x``
        (from ``(2 / pi) theta <= 2 sin(theta / 2) <= theta``).

        Args:
            g: ``(..., 3, 3)`` rotations.

        Returns:
            :class:`~pyg_lie.groups.base.LogNormEmbedding`, ``embedding (..., 9)``.
        """
        self._check_mat(g, "g")
        return LogNormEmbedding(g.reshape(*g.shape[:-2], 9), 1.0, math.pi / 2, ROTATION_CHORD)

    def origin(self, dtype=torch.float32, device=None) -> Tensor:
        return torch.tensor([0.0, 0.0, 1.0], dtype=dtype, device=device)

    def section(self, points: Tensor) -> Tensor:
        """Minimal rotation taking ``e_z`` to ``x / |x|``, ``(..., 3) -> (..., 3, 3)``.

        ``R = I + [v]_x + [v]_x^2 / (1 + c)`` with ``v = e_z x n``, ``c = n_z``. On the
        southern hemisphere ``1 / (1 + c)`` is evaluated as ``(1 - c) / (n_x^2 + n_y^2)``
        (no cancellation). At the antipode ``n = -e_z`` (``n_x^2 + n_y^2 <= eps^2``) the
        fixed rule ``diag(1, -1, -1)`` (rotation by ``pi`` about ``e_x``, the limit
        along the ``+y`` meridian) is used: no continuous global section exists, so
        the section jumps only there.
        """
        self._check_points(points, "points")
        r = points.norm(dim=-1)
        if not bool((r > 0).all()):
            raise ValueError(
                "points contains the origin, which has no lift for SO3 (it acts on R^3 minus the origin); "
                "centre or shift the point cloud, or use SE3")
        n = points / r.unsqueeze(-1)
        nx, ny, c = n.unbind(-1)
        rho2 = nx * nx + ny * ny
        north = c >= 0
        antipode = (~north) & (rho2 <= torch.finfo(n.dtype).eps ** 2)
        one = torch.ones_like(c)
        den = torch.where(north, 1 + c, torch.where(antipode, one, rho2))
        num = torch.where(north, one, 1 - c)
        h = num / den
        zero = torch.zeros_like(c)
        a = torch.where(antipode, zero, nx * nx * h)
        b = torch.where(antipode, zero, nx * ny * h)
        d = torch.where(antipode, 2 * one, ny * ny * h)
        return torch.stack([
            torch.stack([1 - a, -b, nx], -1),
            torch.stack([-b, 1 - d, ny], -1),
            torch.stack([-nx, -ny, c], -1),
        ], -2)

    def orbit_invariants(self, points: Tensor) -> Tensor:
        return points.norm(dim=-1, keepdim=True)

    @property
    def stabilizer_dim(self) -> int:
        return 1

    def stabilizer_random(self, N, K, generator=None, dtype=torch.float32, device=None) -> Tensor:
        """``(N, K, 3, 3)`` Haar rotations ``R_z(alpha)`` about the origin ``e_z``."""
        alpha = (2 * torch.rand(N, K, generator=generator, dtype=torch.float64) - 1) * math.pi
        return _embed_z(rot2(alpha)).to(dtype=dtype, device=device)

    def stabilizer_embed(self, h: Tensor) -> Tensor:
        """``(K, 2, 2)`` planar rotations (e.g. ``Cn(k).elements()``) to ``(K, 3, 3)`` ``R_z``."""
        if not isinstance(h, Tensor) or h.dim() != 3 or h.shape[-2:] != (2, 2):
            raise ValueError(f"subgroup must hold (K, 2, 2) rotation matrices for SO3 (rotations "
                             f"about e_z), got {tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__}")
        _check_proper(h, "subgroup")
        return _embed_z(h)


def _check_proper(h: Tensor, arg: str) -> None:
    """Finite-subgroup elements must be rotations (det > 0), not reflections."""
    _check_finite(h, arg)
    if not tracing() and h.numel() and not bool((torch.linalg.det(h) > 0).all()):
        raise ValueError(f"{arg} contains elements with det <= 0 (reflections); the stabiliser "
                         f"holds rotations only (use Cn, not Dn, or Tetrahedral/Octahedral/Icosahedral)")


def _embed_z(h: Tensor) -> Tensor:
    """``[[h, 0], [0, 1]]`` for ``h (..., 2, 2)``."""
    out = torch.zeros(*h.shape[:-2], 3, 3, dtype=h.dtype, device=h.device)
    out[..., :2, :2] = h
    out[..., 2, 2] = 1
    return out
