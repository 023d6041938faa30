"""SE(2): rigid motions of the plane."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .. import _checks
from .. import ops
from .._safe import cosc, half_cot_half, sinc
from .base import CUT_TOL, ROTATION_CHORD, LieGroup, LogNormEmbedding, batch_shape, homogeneous, rot2
from .so2 import SQRT2, planar_one_sided_cut


class SE2(LieGroup):
    r"""Rigid motions ``[[R(theta), t], [0, 1]]`` of ``R^2``.

    Algebra coordinates ``(u_x, u_y, sqrt(2) theta)`` (blocks ``translation``,
    ``rotation``) in the Frobenius-orthonormal basis ``E_02, E_12, J / sqrt(2)``.

    ``exp``: ``t = V(theta) u`` with ``V = [[sinc, -cosc], [cosc, sinc]](theta)``.
    ``log``: ``theta = atan2`` in ``(-pi, pi]`` and ``u = V^{-1} t`` where
    ``V^{-1} = [[a, b], [-b, a]]``, ``a = (theta/2) cot(theta/2)``, ``b = theta / 2``.

    ``random``: Haar rotation and translation ``~ N(0, scale^2 I)`` (``scale=1``).
    Homogeneous space ``R^2`` with origin ``0``; stabiliser SO(2).
    """

    name = "SE2"
    matrix_size = 3
    dim = 3
    space_dim = 2
    blocks = {"translation": slice(0, 2), "rotation": slice(2, 3)}

    def basis(self, dtype=torch.float64, device=None) -> Tensor:
        E = torch.zeros(3, 3, 3, dtype=dtype, device=device)
        E[0, 0, 2] = 1.0
        E[1, 1, 2] = 1.0
        E[2, 0, 1] = -1.0 / SQRT2
        E[2, 1, 0] = 1.0 / SQRT2
        return E

    def exp(self, xi: Tensor) -> Tensor:
        self._check_vec(xi, "xi")
        u, theta = xi[..., :2], xi[..., 2] / SQRT2
        s, c = sinc(theta), cosc(theta)
        t = torch.stack([s * u[..., 0] - c * u[..., 1], c * u[..., 0] + s * u[..., 1]], -1)
        return homogeneous(rot2(theta), t)

    def log(self, g: Tensor) -> Tensor:
        self._check_mat(g, "g")
        R, t = g[..., :2, :2], g[..., :2, 2]
        theta = torch.atan2(R[..., 1, 0] - R[..., 0, 1], R[..., 0, 0] + R[..., 1, 1])
        return self._log_coords(theta, t[..., 0], t[..., 1])

    @staticmethod
    def _log_coords(theta: Tensor, t0: Tensor, t1: Tensor) -> Tensor:
        """``(..., 3)`` coordinates from the angle and the translation ``(t0, t1)``."""
        a, b = half_cot_half(theta), theta / 2
        return torch.stack([a * t0 + b * t1, -b * t0 + a * t1, SQRT2 * theta], -1)

    def relative_log(self, g: Tensor, edge_index: Tensor, one_sided_cut: bool = False) -> Tensor:
        """:meth:`LieGroup.relative_log` without forming ``g_i^-1 g_j``: per edge only the
        angle terms ``tr(R_i^T R_j)``, ``(R_i^T R_j)_10 - (R_i^T R_j)_01`` and ``R_i^T (t_j - t_i)``,
        from the top two rows of both ends (a quarter of the memory traffic of the 3 x 3 products).

        Args:
            g: ``(N, 3, 3)`` node elements (other shapes use the generic routine).
            edge_index: ``(2, E)``, row 0 source ``j``, row 1 target ``i``.
            one_sided_cut: as in :meth:`LieGroup.relative_log`.

        Returns:
            ``(E, 3)`` coordinates of ``log(g_i^-1 g_j)``.
        """
        if g.dim() != 3:
            return super().relative_log(g, edge_index, one_sided_cut)
        self._check_mat(g, "g")
        _checks.edge_index(edge_index)
        edge_index = _checks.plain_index("edge_index", edge_index)
        cut = -math.pi + CUT_TOL.get(g.dtype, 1e-4) if one_sided_cut else None
        return ops.se2_relative_log(g, edge_index, cut)  # checks the index range

    def one_sided_cut(self, xi: Tensor) -> Tensor:
        return planar_one_sided_cut(xi, 2)

    def inv(self, g: Tensor) -> Tensor:
        Rt = g[..., :2, :2].transpose(-1, -2)
        t = g[..., :2, 2]
        return homogeneous(Rt, -(Rt @ t.unsqueeze(-1)).squeeze(-1))

    def log_norm_embedding(self, g: Tensor) -> LogNormEmbedding:
        r"""``e = (t, sqrt(2) R e_1)``; ``L = 1``, ``U = pi / 2``.

        With ``theta`` the relative angle and ``phi = (theta/2) / sin(theta/2) in [1, pi/2]``:
        ``d^2 = |u|^2 + 2 theta^2`` with ``u = V^{-1} R_i^T (t_j - t_i)`` and both
        singular values of ``V^{-1}`` equal to ``phi``, so
        ``|t_j - t_i| <= |u| <= phi |t_j - t_i|``, while the rotation part is
        ``sqrt(2) theta = phi * 2 sqrt(2) sin(theta/2)``. Hence
        ``x <= d <= phi x <= (pi/2) x`` with ``x = ||e_i - e_j||``, and since
        ``2 sqrt(2) sin(theta/2) <= x``, ``phi <= asin(s)/s``, ``s = min(1, x / (2 sqrt(2)))``.

        Args:
            g: ``(..., 3, 3)`` elements.

        Returns:
            :class:`~pyg_lie.groups.base.LogNormEmbedding`, ``embedding (..., 4)``.
        """
        self._check_mat(g, "g")
        e = torch.cat([g[..., :2, 2], SQRT2 * g[..., :2, 0]], -1)
        return LogNormEmbedding(e, 1.0, math.pi / 2, ROTATION_CHORD)

    def random(self, *batch, generator: Optional[torch.Generator] = None,
               dtype=torch.float32, device=None, scale: float = 1.0) -> Tensor:
        shape = batch_shape(*batch)
        theta = (2 * torch.rand(shape, generator=generator, dtype=torch.float64) - 1) * math.pi
        t = scale * torch.randn(*shape, 2, generator=generator, dtype=torch.float64)
        return homogeneous(rot2(theta), t).to(dtype=dtype, device=device)

    def section(self, points: Tensor) -> Tensor:
        eye = torch.eye(2, dtype=points.dtype, device=points.device).expand(*points.shape[:-1], 2, 2)
        return homogeneous(eye, points)

    @property
    def stabilizer_dim(self) -> int:
        return 1

    def stabilizer_random(self, N, K, generator=None, dtype=torch.float32, device=None) -> Tensor:
        theta = (2 * torch.rand(N, K, generator=generator, dtype=torch.float64) - 1) * math.pi
        zero = torch.zeros(N, K, 2, dtype=torch.float64)
        return homogeneous(rot2(theta), zero).to(dtype=dtype, device=device)

    def stabilizer_embed(self, h: Tensor) -> Tensor:
        if h.dim() != 3 or h.shape[-2:] != (2, 2):
            raise ValueError(f"subgroup must hold (K, 2, 2) rotation matrices for SE2, got {tuple(h.shape)}")
        return homogeneous(h, torch.zeros(*h.shape[:-2], 2, dtype=h.dtype, device=h.device))
