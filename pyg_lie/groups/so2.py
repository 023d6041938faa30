"""SO(2): planar rotations."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .base import CUT_TOL, ROTATION_CHORD, LieGroup, LogNormEmbedding, batch_shape, rot2

SQRT2 = math.sqrt(2.0)


def planar_one_sided_cut(xi: Tensor, index: int) -> Tensor:
    """One side of the cut for SO(2)/SE(2) coordinates with the angle at ``xi[..., index]``.

    ``theta < -pi + tol`` becomes ``theta + 2 pi``. For SE(2) the translation
    coordinates ``u = V^{-1}(theta) t`` with ``V^{-1} = (theta/2) [[cot(theta/2), 1],
    [-1, cot(theta/2)]]`` scale by the same factor ``(theta + 2 pi) / theta``
    because ``cot`` has period ``pi``, so the whole vector is scaled.
    """
    theta = xi[..., index] / SQRT2
    flip = theta < -math.pi + CUT_TOL.get(xi.dtype, 1e-4)
    safe = torch.where(flip, theta, torch.ones_like(theta))
    factor = torch.where(flip, (safe + 2 * math.pi) / safe, torch.ones_like(theta))
    return xi * factor.unsqueeze(-1)


class SO2(LieGroup):
    r"""Rotations of the plane, ``R(theta) = [[cos, -sin], [sin, cos]]``.

    Algebra basis ``E = J / sqrt(2)`` with ``J = [[0, -1], [1, 0]]``, so the
    coordinate of ``log R(theta)`` is ``sqrt(2) theta`` with ``theta in (-pi, pi]``
    (at ``theta = pi`` the convention ``+pi`` is used).

    Homogeneous space: ``R^2 \ {0}``; the section rotates ``e_1`` onto
    ``x / |x|`` and the orbit invariant is ``|x|``. The stabiliser is trivial.
    """

    name = "SO2"
    matrix_size = 2
    dim = 1
    space_dim = 2
    blocks = {"rotation": slice(0, 1)}
    compact = True

    def basis(self, dtype=torch.float64, device=None) -> Tensor:
        J = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=dtype, device=device)
        return (J / SQRT2).unsqueeze(0)

    def exp(self, xi: Tensor) -> Tensor:
        self._check_vec(xi, "xi")
        return rot2(xi[..., 0] / SQRT2)

    def angle(self, g: Tensor) -> Tensor:
        """Rotation angle in ``(-pi, pi]``, shape ``(...)``."""
        self._check_mat(g, "g")
        return torch.atan2(g[..., 1, 0] - g[..., 0, 1], g[..., 0, 0] + g[..., 1, 1])

    def log(self, g: Tensor) -> Tensor:
        return (SQRT2 * self.angle(g)).unsqueeze(-1)

    def inv(self, g: Tensor) -> Tensor:
        return g.transpose(-1, -2)

    def one_sided_cut(self, xi: Tensor) -> Tensor:
        return planar_one_sided_cut(xi, 0)

    def log_norm_embedding(self, g: Tensor) -> LogNormEmbedding:
        r"""``e = sqrt(2) R e_1`` (first column); ``L = 1``, ``U = pi / 2``.

        ``x = ||e_i - e_j|| = ||R_i - R_j||_F = 2 sqrt(2) sin(theta / 2)`` and
        ``d = sqrt(2) theta`` for the relative angle ``theta in [0, pi]``, so
        ``d = x asin(s) / s`` with ``s = x / (2 sqrt(2))`` exactly and
        ``x <= d <= (pi / 2) x`` (from ``(2 / pi) theta <= 2 sin(theta / 2) <= theta``).

        Args:
            g: ``(..., 2, 2)`` rotations.

        Returns:
            :class:`~pyg_lie.groups.base.LogNormEmbedding`, ``embedding (..., 2)``.
        """
        self._check_mat(g, "g")
        return LogNormEmbedding(SQRT2 * g[..., :, 0], 1.0, math.pi / 2, ROTATION_CHORD)

    def random(self, *batch, generator: Optional[torch.Generator] = None,
               dtype=torch.float32, device=None) -> Tensor:
        """Haar-distributed rotations (uniform angle)."""
        shape = batch_shape(*batch)
        theta = (2 * torch.rand(shape, generator=generator, dtype=torch.float64) - 1) * math.pi
        return rot2(theta).to(dtype=dtype, device=device)

    def origin(self, dtype=torch.float32, device=None) -> Tensor:
        return torch.tensor([1.0, 0.0], dtype=dtype, device=device)

    def section(self, points: Tensor) -> Tensor:
        r = points.norm(dim=-1)
        if not bool((r > 0).all()):
            raise ValueError(
                "points contains the origin, which has no lift for SO2 (it acts on R^2 minus the origin); "
                "centre or shift the point cloud, or use SE2")
        return rot2(torch.atan2(points[..., 1], points[..., 0]))

    def orbit_invariants(self, points: Tensor) -> Tensor:
        return points.norm(dim=-1, keepdim=True)
