"""SE(3): rigid motions of 3-space (closed-form exp/log, see ``docs/groups/so3_se3.md``)."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .base import ROTATION_CHORD, LieGroup, LogNormEmbedding, batch_shape, homogeneous, skew3
from .so3 import (SQRT2, SO3, _check_finite, _check_proper, quaternion_to_matrix, rot_coeff_b,
                  rot_coeff_c, rot_coeff_d, rotvec_cut_flip)


class SE3(LieGroup):
    r"""Rigid motions ``[[R, t], [0, 1]]`` of ``R^3``, elements ``(..., 4, 4)``.

    Algebra coordinates ``(u_x, u_y, u_z, sqrt(2) omega)`` (blocks ``translation``
    then ``rotation``, as in SE2) in the Frobenius-orthonormal basis
    ``E_03, E_13, E_23, L_x / sqrt(2), L_y / sqrt(2), L_z / sqrt(2)``.

    ``exp``: ``R = exp_SO3(omega)``, ``t = V(omega) u`` with
    ``V = I + B [w]_x + C [w]_x^2``, ``B = (1 - cos)/theta^2``, ``C = (theta - sin)/theta^3``.
    ``log``: ``omega = log_SO3(R)`` (principal, ``theta in [0, pi]``) and
    ``u = V^{-1} t``, ``V^{-1} = I - [w]_x / 2 + D [w]_x^2``,
    ``D = (1 - (theta/2) cot(theta/2)) / theta^2``; all coefficients are evaluated
    as functions of ``theta^2`` with Taylor branches near 0.
    ``one_sided_cut``: the SO(3) rule for ``omega`` with ``u -> V(omega')^{-1} V(omega) u``.

    ``random``: Haar rotation and translation ``~ N(0, scale^2 I)`` (``scale=1``).
    Homogeneous space ``R^3`` with origin ``0``; section = pure translation;
    stabiliser SO(3).
    """

    name = "SE3"
    matrix_size = 4
    dim = 6
    space_dim = 3
    blocks = {"translation": slice(0, 3), "rotation": slice(3, 6)}

    def basis(self, dtype=torch.float64, device=None) -> Tensor:
        E = torch.zeros(6, 4, 4, dtype=dtype, device=device)
        for k in range(3):
            E[k, k, 3] = 1.0
        E[3:, :3, :3] = skew3(torch.eye(3, dtype=dtype, device=device)) / SQRT2
        return E

    def exp(self, xi: Tensor) -> Tensor:
        self._check_vec(xi, "xi")
        _check_finite(xi, "xi")
        u, omega = xi[..., :3], xi[..., 3:] / SQRT2
        return homogeneous(SO3.exp_rotvec(omega), self.v_apply(omega, u))

    def log(self, g: Tensor) -> Tensor:
        self._check_mat(g, "g")
        R, t = g[..., :3, :3], g[..., :3, 3]
        omega = SO3.log_rotvec(R)
        return torch.cat([self.v_inv_apply(omega, t), SQRT2 * omega], -1)

    @staticmethod
    def v_apply(omega: Tensor, u: Tensor) -> Tensor:
        """``V(omega) u = u + B omega x u + C omega x (omega x u)`` (left Jacobian of SO(3)).

        ``omega (..., 3)`` rotation vectors, ``u (..., 3)`` -> ``(..., 3)``; finite
        with finite derivatives for every ``omega`` (no input checks).
        """
        t2 = (omega * omega).sum(-1, keepdim=True)
        wu = torch.linalg.cross(omega, u, dim=-1)
        wwu = torch.linalg.cross(omega, wu, dim=-1)
        return u + rot_coeff_b(t2) * wu + rot_coeff_c(t2) * wwu

    @staticmethod
    def v_inv_apply(omega: Tensor, t: Tensor) -> Tensor:
        """``V(omega)^-1 t = t - omega x t / 2 + D omega x (omega x t)``.

        ``omega (..., 3)``, ``t (..., 3)`` -> ``(..., 3)``; finite for
        ``|omega| < 2 pi`` (no input checks).
        """
        t2 = (omega * omega).sum(-1, keepdim=True)
        wt = torch.linalg.cross(omega, t, dim=-1)
        wwt = torch.linalg.cross(omega, wt, dim=-1)
        return t - 0.5 * wt + rot_coeff_d(t2) * wwt

    def one_sided_cut(self, xi: Tensor) -> Tensor:
        r"""One side of the log's cut at rotation angle ``pi``: ``(..., 6) -> (..., 6)``.

        The rotation part follows SO(3) (:func:`~pyg_lie.groups.so3.rotvec_cut_flip`):
        where ``|omega| > pi - CUT_TOL`` and ``omega . v < 0``,
        ``omega' = omega (|omega| - 2 pi) / |omega|``. The translation coordinates are
        rewritten so the element is unchanged, ``u' = V(omega')^{-1} V(omega) u``
        (``t = V(omega) u`` is what :meth:`exp` builds); elsewhere ``xi`` is returned
        as is. Unflipped entries evaluate ``V^{-1}`` at ``0`` in the discarded branch,
        so values and gradients are finite everywhere (also at ``omega = 0`` and
        exactly ``pi``); no data-dependent Python branching.
        """
        u, rot = xi[..., :3], xi[..., 3:]
        omega = rot / SQRT2
        flip, factor = rotvec_cut_flip(omega)
        omega_new = torch.where(flip.unsqueeze(-1), omega * factor, torch.zeros_like(omega))
        u_new = self.v_inv_apply(omega_new, self.v_apply(omega, u))
        return torch.cat([torch.where(flip.unsqueeze(-1), u_new, u), rot * factor], -1)

    def inv(self, g: Tensor) -> Tensor:
        Rt = g[..., :3, :3].transpose(-1, -2)
        t = g[..., :3, 3]
        return homogeneous(Rt, -(Rt @ t.unsqueeze(-1)).squeeze(-1))

    def random(self, *batch, generator: Optional[torch.Generator] = None,
               dtype=torch.float32, device=None, scale: float = 1.0) -> Tensor:
        """Haar rotation (normalised Gaussian quaternion) and translation ``~ N(0, scale^2 I)``."""
        shape = batch_shape(*batch)
        q = torch.randn(*shape, 4, generator=generator, dtype=torch.float64)
        t = scale * torch.randn(*shape, 3, generator=generator, dtype=torch.float64)
        return homogeneous(quaternion_to_matrix(q), t).to(dtype=dtype, device=device)

    # ------------------------------------------------------ homogeneous space
    def section(self, points: Tensor) -> Tensor:
        """Pure translation by ``x``: ``(..., 3) -> (..., 4, 4)``."""
        eye = torch.eye(3, dtype=points.dtype, device=points.device).expand(*points.shape[:-1], 3, 3)
        return homogeneous(eye, points)

    @property
    def stabilizer_dim(self) -> int:
        return 3

    def stabilizer_random(self, N, K, generator=None, dtype=torch.float32, device=None) -> Tensor:
        """``(N, K, 4, 4)`` Haar rotations about the origin."""
        q = torch.randn(N, K, 4, generator=generator, dtype=torch.float64)
        zero = torch.zeros(N, K, 3, dtype=torch.float64)
        return homogeneous(quaternion_to_matrix(q), zero).to(dtype=dtype, device=device)

    def stabilizer_embed(self, h: Tensor) -> Tensor:
        """``(K, 3, 3)`` rotations (e.g. ``Octahedral().elements()``) to ``(K, 4, 4)``."""
        if not isinstance(h, Tensor) or h.dim() != 3 or h.shape[-2:] != (3, 3):
            raise ValueError(f"subgroup must hold (K, 3, 3) rotation matrices for SE3, got "
                             f"{tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__}")
        _check_proper(h, "subgroup")
        return homogeneous(h, torch.zeros(*h.shape[:-2], 3, dtype=h.dtype, device=h.device))

    def log_norm_embedding(self, g: Tensor) -> LogNormEmbedding:
        r"""``e = (t, vec(R))``; ``L = 1``, ``U = pi / 2``.

        With ``theta`` the relative angle and ``phi = (theta/2) / sin(theta/2) in [1, pi/2]``:
        ``d^2 = |u|^2 + 2 theta^2``, ``u = V(omega)^{-1} R_i^T (t_j - t_i)``; the
        singular values of ``V^{-1}`` are ``1`` (along ``omega``) and ``phi`` (twice),
        so ``|t_j - t_i| <= |u| <= phi |t_j - t_i|``, and the rotation part is
        ``sqrt(2) theta = phi ||R_i - R_j||_F``. Hence ``x <= d <= phi x <= (pi/2) x``
        for ``x = ||e_i - e_j||``; as ``||R_i - R_j||_F <= x``,
        ``phi <= asin(s) / s`` with ``s = min(1, x / (2 sqrt(2)))``.

        Args:
            g: ``(..., 4, 4)`` elements.

        Returns:
            :class:`~pyg_lie.groups.base.LogNormEmbedding`, ``embedding (..., 12)``.
        """
        self._check_mat(g, "g")
        e = torch.cat([g[..., :3, 3], g[..., :3, :3].reshape(*g.shape[:-2], 9)], -1)
        return LogNormEmbedding(e, 1.0, math.pi / 2, ROTATION_CHORD)
