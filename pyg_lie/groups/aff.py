r"""Aff+(2) and Aff+(3): affine maps ``x -> A x + t`` of ``R^n`` with ``det A > 0``.

Elements are ``(..., n+1, n+1)`` homogeneous matrices ``[[A, t], [0, 1]]``. The
algebra ``gl(n) x R^n`` has a Frobenius-orthonormal basis split into mutually
orthogonal blocks, translation first::

    translation  E_{i,n}                       (n)
    rotation     skew-symmetric / sqrt(2)       (n(n-1)/2)
    scale        I / sqrt(n)                    (1)
    shear        traceless symmetric, orthonormal (n(n+1)/2 - 1)

``exp`` is :func:`torch.linalg.matrix_exp` of ``hat``. ``log`` is the real
principal logarithm; it exists only when ``A`` has no eigenvalue on
``(-inf, 0]`` (``det A > 0`` is not enough: ``diag(-1, -2)``), see
:meth:`in_chart`. Aff2 uses a closed form, Aff3 inverse scaling and squaring with
a Frechet-derivative backward (:mod:`pyg_lie.groups._aff_log`). The translation
coordinate of ``log g`` is ``u = phi(X)^{-1} t`` with ``X = log A`` and
``phi(X) = sum_k X^k / (k+1)!``. Details and formulas: ``docs/groups/aff.md``.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .._tracing import tracing
from ._aff_log import logm, phi
from .base import LieGroup, batch_shape, homogeneous, rot2, skew3

SQRT2 = math.sqrt(2.0)
SQRT3 = math.sqrt(3.0)
SQRT6 = math.sqrt(6.0)

_CHART_MSG = (
    "{arg} is outside the principal log chart: linear part has an eigenvalue on (-inf, 0] "
    "(det A > 0 is not enough, e.g. A = diag(-1, -2) or a rotation by pi composed with a "
    "stretch), so no real principal logarithm exists; use {name}.in_chart(g) to mask such "
    "elements, or sample with {name}.random_in_chart")


class _Aff(LieGroup):
    """Shared code of :class:`Aff2` and :class:`Aff3`; ``n`` is the space dimension."""

    half_precision = False  # matrix_exp, solve, det and eigvals have no half kernels

    n: int
    compact = False
    has_chart_boundary = True

    # ------------------------------------------------------------------ basis
    def _linear_basis(self, dtype, device) -> Tensor:
        """``(n*n, n, n)`` orthonormal basis of ``gl(n)``: rotation, scale, shear."""
        raise NotImplementedError

    def basis(self, dtype=torch.float64, device=None) -> Tensor:
        """Orthonormal basis ``(dim, n+1, n+1)``: translation, rotation, scale, shear."""
        n, m = self.n, self.n + 1
        E = torch.zeros(self.dim, m, m, dtype=dtype, device=device)
        for i in range(n):
            E[i, i, n] = 1.0
        E[n:, :n, :n] = self._linear_basis(dtype, device)
        return E

    # ----------------------------------------------------------------- checks
    def _split(self, g: Tensor) -> tuple[Tensor, Tensor]:
        n = self.n
        return g[..., :n, :n], g[..., :n, n]

    def _check_element(self, g: Tensor, arg: str) -> None:
        """Shape, dtype, finiteness and ``det A > 0`` (the data checks are skipped under torch.compile)."""
        self._check_mat(g, arg)
        if tracing():
            return
        det = torch.linalg.det(g[..., :self.n, :self.n])
        if not bool((det > 0).all()):
            raise ValueError(
                f"{arg} has a linear part with det <= 0; {self.name} requires det A > 0 "
                f"(an invertible, orientation-preserving linear part)")

    def in_chart(self, g: Tensor) -> Tensor:
        """``(...)`` bool: does ``g (..., n+1, n+1)`` have a real principal logarithm?

        True iff the linear part has no eigenvalue on ``(-inf, 0]`` (which also
        excludes ``det A <= 0``). Raises only for a wrong shape or non-finite input.
        """
        self._check_mat(g, "g")
        return self._in_chart(g[..., :self.n, :self.n])

    def _in_chart(self, A: Tensor) -> Tensor:
        raise NotImplementedError

    def _check_chart(self, g: Tensor, arg: str) -> None:
        if tracing():
            return
        if not bool(self._in_chart(g[..., :self.n, :self.n]).all()):
            raise ValueError(_CHART_MSG.format(arg=arg, name=self.name))

    # ------------------------------------------------------------ group maps
    def exp(self, xi: Tensor) -> Tensor:
        """``(..., dim) -> (..., n+1, n+1)`` by ``matrix_exp(hat(xi))``."""
        return torch.linalg.matrix_exp(self.hat(xi))

    def _translation_log(self, X: Tensor, t: Tensor) -> Tensor:
        """``u = phi(X)^{-1} t`` for ``X (..., n, n)``, ``t (..., n)``."""
        return torch.linalg.solve(phi(X), t.unsqueeze(-1)).squeeze(-1)

    def _coords(self, X: Tensor, u: Tensor) -> Tensor:
        """Coordinates ``(..., dim)`` of ``[[X, u], [0, 0]]`` from ``X (..., n, n)``, ``u (..., n)``."""
        B = self._linear_basis(X.dtype, X.device)
        return torch.cat([u, torch.einsum("...ij,kij->...k", X, B)], -1)

    def inv(self, g: Tensor) -> Tensor:
        """``[[A^-1, -A^-1 t], [0, 1]]``, shape ``(..., n+1, n+1)``."""
        self._check_element(g, "g")
        A, t = self._split(g)
        Ai = self._inv_linear(A)
        return homogeneous(Ai, -(Ai @ t.unsqueeze(-1)).squeeze(-1))

    def _inv_linear(self, A: Tensor) -> Tensor:
        return torch.linalg.inv(A)

    # ---------------------------------------------------------------- random
    def _random_linear(self, shape: tuple[int, ...], generator: Optional[torch.Generator],
                       scale_sigma: float, shear_sigma: float) -> Tensor:
        """``A = R exp(s I + sum_k c_k B_k)`` in float64 on the CPU, shape ``(*shape, n, n)``."""
        n = self.n
        R = self._haar_rotation(shape, generator)
        s = scale_sigma * torch.randn(shape, generator=generator, dtype=torch.float64)
        nsh = self.blocks["shear"].stop - self.blocks["shear"].start
        c = shear_sigma * torch.randn(*shape, nsh, generator=generator, dtype=torch.float64)
        B = self.basis(torch.float64)[self.blocks["shear"], :n, :n]
        S = torch.einsum("...k,kij->...ij", c, B) + s[..., None, None] * torch.eye(n, dtype=torch.float64)
        return R @ torch.linalg.matrix_exp(S)

    def _haar_rotation(self, shape, generator) -> Tensor:
        raise NotImplementedError

    def random(self, *batch, generator: Optional[torch.Generator] = None,
               dtype=torch.float32, device=None, scale: float = 1.0,
               scale_sigma: float = 0.3, shear_sigma: float = 0.3) -> Tensor:
        """Random elements ``(*batch, n+1, n+1)``.

        ``A = R exp(S)``: ``R`` Haar on SO(n), ``S = s I + sum_k c_k B_k`` with
        ``s ~ N(0, scale_sigma^2)``, ``c_k ~ N(0, shear_sigma^2)`` in the orthonormal
        traceless-symmetric basis ``B_k``; ``t ~ N(0, scale^2 I)``. ``det A = e^{n s} > 0``
        always, but ``A`` can have negative real eigenvalues (rotation near pi and
        enough shear), so a few samples lie outside the log chart; see
        :meth:`random_in_chart`.
        """
        shape = batch_shape(*batch)
        A = self._random_linear(shape, generator, scale_sigma, shear_sigma)
        t = scale * torch.randn(*shape, self.n, generator=generator, dtype=torch.float64)
        return homogeneous(A, t).to(dtype=dtype, device=device)

    def random_in_chart(self, *batch, generator: Optional[torch.Generator] = None,
                        dtype=torch.float32, device=None, scale: float = 1.0,
                        scale_sigma: float = 0.3, shear_sigma: float = 0.3,
                        max_rounds: int = 100) -> Tensor:
        """:meth:`random` conditioned on :meth:`in_chart` (rejection sampling), ``(*batch, n+1, n+1)``."""
        shape = batch_shape(*batch)
        g = self.random(shape, generator=generator, dtype=torch.float64, scale=scale,
                        scale_sigma=scale_sigma, shear_sigma=shear_sigma)
        flat = g.reshape(-1, self.n + 1, self.n + 1)
        for _ in range(max_rounds):
            bad = ~self._in_chart(flat[:, :self.n, :self.n])
            k = int(bad.sum())
            if k == 0:
                break
            flat[bad] = self.random(k, generator=generator, dtype=torch.float64, scale=scale,
                                    scale_sigma=scale_sigma, shear_sigma=shear_sigma)
        else:  # pragma: no cover - needs absurd sigmas
            raise ValueError("random_in_chart: could not sample in-chart elements; reduce shear_sigma")
        return flat.reshape(g.shape).to(dtype=dtype, device=device)

    # ------------------------------------------------------ homogeneous space
    def section(self, points: Tensor) -> Tensor:
        """Pure translation ``[[I, x], [0, 1]]``, ``(N, n) -> (N, n+1, n+1)``."""
        n = self.n
        eye = torch.eye(n, dtype=points.dtype, device=points.device).expand(*points.shape[:-1], n, n)
        return homogeneous(eye, points)

    @property
    def stabilizer_dim(self) -> int:
        """The stabiliser of the origin is GL+(n), of dimension ``n*n``."""
        return self.n * self.n

    def stabilizer_random(self, N, K, generator=None, dtype=torch.float32, device=None) -> Tensor:
        """``(N, K, n+1, n+1)`` linear maps drawn like :meth:`random`'s linear part, ``t = 0``."""
        A = self._random_linear((N, K), generator, 0.3, 0.3)
        return homogeneous(A, torch.zeros(N, K, self.n, dtype=torch.float64)).to(dtype=dtype, device=device)

    def stabilizer_embed(self, h: Tensor) -> Tensor:
        """``(K, n, n)`` matrices with ``det > 0`` to ``(K, n+1, n+1)`` elements fixing the origin."""
        n = self.n
        if not isinstance(h, Tensor) or h.dim() != 3 or h.shape[-2:] != (n, n):
            shape = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
            raise ValueError(f"subgroup must hold (K, {n}, {n}) matrices with det > 0 for {self.name}, got {shape}")
        if not bool(torch.isfinite(h).all()):
            raise ValueError("subgroup contains non-finite entries (NaN or inf)")
        if not bool((torch.linalg.det(h) > 0).all()):
            raise ValueError(f"subgroup has a matrix with det <= 0; {self.name} requires det A > 0")
        return homogeneous(h, torch.zeros(*h.shape[:-2], n, dtype=h.dtype, device=h.device))


class Aff2(_Aff):
    r"""Orientation-preserving affine maps of the plane, ``[[A, t], [0, 1]]``, ``det A > 0``.

    Coordinates ``(u_x, u_y, rot, scale, shear_1, shear_2)`` in the orthonormal basis
    ``E_02, E_12, J/sqrt(2), I/sqrt(2), diag(1,-1)/sqrt(2), (E_01+E_10)/sqrt(2)``.

    ``log``: with ``m = tr A / 2``, ``N = A - m I`` and ``disc = ((a-d)/2)^2 + bc``
    (so ``N^2 = disc I``), ``log A = (1/2) log det A I + beta N`` where
    ``beta = (log lam_+ - log lam_-) / (2 sqrt(disc))`` for ``disc > 0``,
    ``atan2(sqrt(-disc), m) / sqrt(-disc)`` for ``disc < 0`` and the series
    ``sum_k (disc/m^2)^k / ((2k+1) m)`` when ``|disc| < 0.01 m^2``.
    In chart iff ``det A > 0`` and (``disc < 0`` or ``m > 0``).
    """

    name = "Aff2"
    n = 2
    matrix_size = 3
    dim = 6
    space_dim = 2
    blocks = {"translation": slice(0, 2), "rotation": slice(2, 3), "scale": slice(3, 4), "shear": slice(4, 6)}

    def _linear_basis(self, dtype, device) -> Tensor:
        r = 1.0 / SQRT2
        return torch.tensor([
            [[0.0, -r], [r, 0.0]],   # rotation J / sqrt(2)
            [[r, 0.0], [0.0, r]],    # scale I / sqrt(2)
            [[r, 0.0], [0.0, -r]],   # shear diag(1, -1) / sqrt(2)
            [[0.0, r], [r, 0.0]],    # shear (E01 + E10) / sqrt(2)
        ], dtype=dtype, device=device)

    @staticmethod
    def _invariants(A: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        a, b, c, d = A[..., 0, 0], A[..., 0, 1], A[..., 1, 0], A[..., 1, 1]
        m, h = (a + d) / 2, (a - d) / 2
        disc = h * h + b * c
        det = a * d - b * c
        return m, h, disc, det

    def _in_chart(self, A: Tensor) -> Tensor:
        m, _, disc, det = self._invariants(A)
        return (det > 0) & ((disc < 0) | (m > 0))

    def _log_linear(self, A: Tensor) -> tuple[Tensor, Tensor]:
        """``(alpha, beta)`` with ``log A = alpha I + beta (A - m I)``, each ``(...)``."""
        m, _, disc, det = self._invariants(A)
        one = torch.ones_like(m)
        det_safe = torch.where(det > 0, det, one)
        alpha = 0.5 * torch.log(det_safe)
        # series branch: beta = F(u) / m, F(u) = sum u^k / (2k+1), u = disc / m^2
        m_safe = torch.where(m > 0, m, one)
        series = (m > 0) & (disc.abs() < 0.01 * m * m)
        u = torch.where(series, disc / (m_safe * m_safe), torch.zeros_like(m))
        F = torch.zeros_like(m)
        for k in range(9, -1, -1):  # Horner; |u| < 0.01 so u^10 < 1e-20
            F = F * u + 1.0 / (2 * k + 1)
        beta_series = F / m_safe
        # real distinct eigenvalues lam_+ = m + r, lam_- = det / lam_+ (no cancellation)
        pos = (disc > 0) & ~series
        r = torch.sqrt(torch.where(pos, disc, one))
        lam_p = torch.where(pos & (m + r > 0), m + r, one)
        lam_m = torch.where(pos & (det > 0), det_safe / lam_p, one)
        beta_pos = 0.5 * (torch.log(lam_p) - torch.log(lam_m)) / r
        # complex pair m +- i w
        neg = (disc <= 0) & ~series
        w = torch.sqrt(torch.where(neg & (disc < 0), -disc, one))
        beta_neg = torch.atan2(w, torch.where(neg, m, one)) / w
        beta = torch.where(series, beta_series, torch.where(pos, beta_pos, beta_neg))
        return alpha, beta

    def log(self, g: Tensor) -> Tensor:
        """Principal log, ``(..., 3, 3) -> (..., 6)``; raises ValueError outside the chart."""
        self._check_element(g, "g")
        self._check_chart(g, "g")
        A, t = self._split(g)
        alpha, beta = self._log_linear(A)
        a, b, c, d = A[..., 0, 0], A[..., 0, 1], A[..., 1, 0], A[..., 1, 1]
        h = (a - d) / 2
        eye = torch.eye(2, dtype=A.dtype, device=A.device)
        X = alpha[..., None, None] * eye + beta[..., None, None] * (A - ((a + d) / 2)[..., None, None] * eye)
        u = self._translation_log(X, t)
        lin = torch.stack([beta * (c - b) / SQRT2, SQRT2 * alpha, SQRT2 * beta * h, beta * (b + c) / SQRT2], -1)
        return torch.cat([u, lin], -1)

    def _inv_linear(self, A: Tensor) -> Tensor:
        a, b, c, d = A[..., 0, 0], A[..., 0, 1], A[..., 1, 0], A[..., 1, 1]
        det = (a * d - b * c)[..., None, None]
        adj = torch.stack([torch.stack([d, -b], -1), torch.stack([-c, a], -1)], -2)
        return adj / det

    def _haar_rotation(self, shape, generator) -> Tensor:
        theta = (2 * torch.rand(shape, generator=generator, dtype=torch.float64) - 1) * math.pi
        return rot2(theta)


class Aff3(_Aff):
    r"""Orientation-preserving affine maps of ``R^3``, ``[[A, t], [0, 1]]``, ``det A > 0``.

    Coordinates (12): translation ``E_03, E_13, E_23``; rotation ``skew3(e_k)/sqrt(2)``;
    scale ``I/sqrt(3)``; shear ``diag(1,-1,0)/sqrt(2)``, ``diag(1,1,-2)/sqrt(6)``,
    ``(E_01+E_10)/sqrt(2)``, ``(E_02+E_20)/sqrt(2)``, ``(E_12+E_21)/sqrt(2)``.

    ``log``: inverse scaling and squaring on the homogeneous ``4 x 4`` matrix (with
    the translation pre-scaled to norm <= 1, exact by similarity), custom backward via
    the Frechet derivative. Chart test: eigenvalues of ``A`` (``torch.linalg.eigvals``).
    """

    name = "Aff3"
    n = 3
    matrix_size = 4
    dim = 12
    space_dim = 3
    blocks = {"translation": slice(0, 3), "rotation": slice(3, 6), "scale": slice(6, 7), "shear": slice(7, 12)}

    def _linear_basis(self, dtype, device) -> Tensor:
        B = torch.zeros(9, 3, 3, dtype=dtype, device=device)
        B[0:3] = skew3(torch.eye(3, dtype=dtype, device=device)) / SQRT2
        B[3] = torch.eye(3, dtype=dtype, device=device) / SQRT3
        B[4, 0, 0], B[4, 1, 1] = 1 / SQRT2, -1 / SQRT2
        B[5, 0, 0], B[5, 1, 1], B[5, 2, 2] = 1 / SQRT6, 1 / SQRT6, -2 / SQRT6
        for k, (i, j) in enumerate(((0, 1), (0, 2), (1, 2))):
            B[6 + k, i, j] = B[6 + k, j, i] = 1 / SQRT2
        return B

    def _in_chart(self, A: Tensor) -> Tensor:
        lam = torch.linalg.eigvals(A)
        # a real eigenvalue (LAPACK returns exactly zero imaginary parts for them; allow a
        # few ulps of rounding) that is <= 0
        tol = 16 * torch.finfo(A.dtype).eps * lam.abs()
        on_cut = (lam.imag.abs() <= tol) & (lam.real <= 0)
        return ~on_cut.any(-1)

    def log(self, g: Tensor) -> Tensor:
        """Principal log, ``(..., 4, 4) -> (..., 12)``; raises ValueError outside the chart."""
        self._check_element(g, "g")
        self._check_chart(g, "g")
        A, t = self._split(g)
        # similarity diag(I, 1/c) g diag(I, c) scales t by c; the log's translation scales alike
        c = (1.0 / torch.sqrt(1.0 + t.detach().square().sum(-1)))[..., None]
        L = logm(homogeneous(A, c * t))
        return self._coords(L[..., :3, :3], L[..., :3, 3] / c)

    def _haar_rotation(self, shape, generator) -> Tensor:
        q = torch.randn(*shape, 4, generator=generator, dtype=torch.float64)
        q = q / q.norm(dim=-1, keepdim=True)
        w, x, y, z = q.unbind(-1)
        return torch.stack([
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ], -2)
