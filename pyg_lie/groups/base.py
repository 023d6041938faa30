"""The common interface of every matrix Lie group in :mod:`pyg_lie.groups`.

Elements are batched ``(..., m, m)`` matrices, algebra elements are coordinate
vectors ``(..., dim)`` in a fixed basis that is orthonormal for the Frobenius
inner product ``<A, B> = tr(A^T B)``, so ``||vee(X)|| = ||X||_F``.
"""
from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from typing import NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .._checks import positive_int
from .._tracing import tracing


# distance to the log's cut within which `one_sided_cut` picks a side, per dtype
CUT_TOL = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float32: 1e-4, torch.float64: 1e-9}

#: Chord ``||R_i - R_j||_F`` of two rotations at relative angle ``pi`` (SO(2), SO(3)).
ROTATION_CHORD = 2.0 * math.sqrt(2.0)


class LogNormEmbedding(NamedTuple):
    r"""A Euclidean embedding that brackets the log-norm metric (see :meth:`LieGroup.log_norm_embedding`).

    For group elements ``g_i, g_j`` with embedding distance ``x = ||e_i - e_j||``::

        lower * x  <=  d(g_i, g_j) = ||vee(log(g_i^-1 g_j))||  <=  upper_bound(x)  <=  upper * x

    (in exact arithmetic, for exact group elements).

    Attributes:
        embedding: ``(..., D)`` embedded elements ``e``.
        lower: the constant ``L > 0``.
        upper: the constant ``U >= L``.
        chord: ``None`` or the chord ``c`` of a rotation part; then the sharper
            :meth:`upper_bound` ``x asin(s) / s``, ``s = min(1, x / c)``, holds.
    """

    embedding: Tensor
    lower: float
    upper: float
    chord: Optional[float] = None

    def upper_bound(self, x: Tensor) -> Tensor:
        """Upper bound of ``d`` for embedding distances ``x (...)`` (nondecreasing), ``(...)``."""
        if self.chord is None:
            return self.upper * x
        s = (x / self.chord).clamp(0.0, 1.0)
        ratio = torch.where(s > 1e-4, torch.asin(s) / s.clamp(min=1e-4), 1 + s * s / 6 + 1e-12)
        return torch.minimum(x * ratio, self.upper * x)


class LieGroup(ABC):
    """Abstract matrix Lie group.

    Subclasses set the class attributes and implement :meth:`exp`, :meth:`log`
    and, where they have one, a closed-form :meth:`inv`.

    Attributes:
        name: short name such as ``"SE3"``.
        matrix_size: ``m``, elements are ``(..., m, m)``.
        dim: dimension of the Lie algebra.
        space_dim: ``n``, the group acts on points of ``R^n`` (``S^2`` for SO(3)).
        blocks: ordered ``{name: slice}`` decomposition of algebra coordinates.
    """

    name: str = "LieGroup"
    matrix_size: int
    dim: int
    space_dim: int
    blocks: dict[str, slice]
    compact: bool = False

    # ------------------------------------------------------------------ basis
    @abstractmethod
    def basis(self, dtype: torch.dtype = torch.float64, device=None) -> Tensor:
        """Orthonormal (Frobenius) basis of the algebra, shape ``(dim, m, m)``."""

    def hat(self, xi: Tensor) -> Tensor:
        """Coordinates ``(..., dim)`` to algebra matrices ``(..., m, m)``."""
        self._check_vec(xi, "xi")
        E = self.basis(xi.dtype, xi.device)
        return torch.einsum("...k,kij->...ij", xi, E)

    def vee(self, X: Tensor) -> Tensor:
        """Algebra matrices ``(..., m, m)`` to coordinates ``(..., dim)`` (projection)."""
        self._check_mat(X, "X", finite=True)
        E = self.basis(X.dtype, X.device)
        return torch.einsum("...ij,kij->...k", X, E)

    # ------------------------------------------------------------ exp and log
    def exp(self, xi: Tensor) -> Tensor:
        """Exponential map from coordinates ``(..., dim)`` to elements ``(..., m, m)``."""
        return torch.linalg.matrix_exp(self.hat(xi))

    @abstractmethod
    def log(self, g: Tensor) -> Tensor:
        """Principal logarithm, elements ``(..., m, m)`` to coordinates ``(..., dim)``."""

    # ---------------------------------------------------------- group algebra
    def compose(self, g: Tensor, h: Tensor) -> Tensor:
        """Product ``g h`` (broadcasting over leading dimensions)."""
        return g @ h

    def inv(self, g: Tensor) -> Tensor:
        """Inverse ``g^-1``."""
        return torch.linalg.inv(g)

    def between(self, g: Tensor, h: Tensor) -> Tensor:
        """Relative element ``g^-1 h``."""
        return self.compose(self.inv(g), h)

    def relative_log(self, g: Tensor, edge_index: Tensor, one_sided_cut: bool = False) -> Tensor:
        """The shared relative-pose routine: ``vee(log(g_i^-1 g_j))`` per edge.

        Args:
            g: node elements ``(N, m, m)`` (or ``(N, ...)`` with leading node dim).
            edge_index: ``(2, E)`` PyG edge index, row 0 = source ``j``,
                row 1 = target ``i``.
            one_sided_cut: apply :meth:`one_sided_cut` (deterministic side of the
                log's cut at rotation angle ``pi``; needed for exact invariance of
                even-order finite lifts).

        Returns:
            ``(E, dim)`` coordinates of ``log(g_i^-1 g_j)``.

        Raises:
            ValueError: ``edge_index`` is not an integer ``(2, E)`` tensor, or an index lies
                outside ``[0, N)`` (negative ones included: they are never counted from the
                end; one ``aminmax``, left out under ``torch.compile``).
        """
        from .. import _checks

        _checks.edge_index(edge_index)
        edge_index = _checks.index_tensor("edge_index", edge_index, g.shape[0])
        src, dst = edge_index[0], edge_index[1]
        xi = self.log(self.between(g.index_select(0, dst), g.index_select(0, src)))
        return self.one_sided_cut(xi) if one_sided_cut else xi

    #: True for groups whose principal log is not defined everywhere (the affine groups)
    has_chart_boundary: bool = False

    def in_chart(self, g: Tensor) -> Tensor:
        """``(...)`` bool: does ``g (..., m, m)`` have a principal log? (All True by default.)"""
        self._check_mat(g, "g")
        return torch.ones(g.shape[:-2], dtype=torch.bool, device=g.device)

    def masked_log(self, g: Tensor) -> tuple[Tensor, Tensor]:
        """Log where it exists, zeros elsewhere: ``(..., m, m) -> ((..., dim), (...) bool)``.

        Elements outside the chart are replaced by the identity before :meth:`log`,
        so their coordinates are ``0`` with zero gradient; the mask is :meth:`in_chart`.
        Never raises for finite input.
        """
        inside = self.in_chart(g)
        eye = torch.eye(self.matrix_size, dtype=g.dtype, device=g.device)
        safe = torch.where(inside[..., None, None], g, eye)
        return self.log(safe) * inside[..., None].to(g.dtype), inside

    def one_sided_cut(self, xi: Tensor) -> Tensor:
        """Choose one side of the principal log's cut deterministically.

        At rotation angle ``pi`` the principal log has two values and rounding
        picks either. Groups with a rotation part override this with an *exact*
        rewrite of the same element's log within :data:`CUT_TOL` of the cut, so
        the result is still a function of the element only. Default: unchanged.

        Args:
            xi: ``(..., dim)`` principal-log coordinates.
        """
        return xi

    def log_norm_embedding(self, g: Tensor) -> Optional[LogNormEmbedding]:
        r"""Euclidean embedding ``e(g)`` with two-sided bounds on the log-norm metric.

        ``d(g_i, g_j) = ||vee(log(g_i^-1 g_j))||`` is bracketed by the embedding
        distance (:class:`LogNormEmbedding`), so neighbour searches in this metric
        can use a k-d tree on ``e`` and evaluate exact logs only on candidates
        (:func:`pyg_lie.neighbors.log_knn_graph`). Overrides: ``Tn`` (``e = t``,
        ``L = U = 1``), ``SO2``/``SO3`` (``e = vec(R)``, up to a column subset
        with the same distances), ``SE2``/``SE3`` (``e = (t, vec(R))``), all with
        ``L = 1``, ``U = pi / 2``. The bounds assume exact group elements
        (orthonormal rotation parts up to rounding).

        Args:
            g: ``(..., m, m)`` elements.

        Returns:
            :class:`LogNormEmbedding` with ``embedding (..., D)``, or ``None``
            (default: no such embedding known, e.g. the affine groups).
        """
        return None

    def contains(self, g: Tensor, tol: Optional[float] = None) -> Tensor:
        """Which of the matrices ``g (..., m, m)`` are elements of the group: ``(...)`` bools.

        Groups with an everywhere-defined log (rotations, rigid motions, translations): the
        round trip ``exp(log(g))`` must give ``g`` back to ``tol`` relative to the largest
        entry (default ``eps^(1/3)`` of the dtype: ``5e-3`` in float32, ``6e-6`` in float64,
        above the rounding of composed elements and the steps of finite-difference gradient
        checks, far below the error of a matrix that is no element). Affine groups: last row ``(0, ..., 0, 1)`` and a linear
        part of positive determinant. Non-finite matrices are not elements.
        """
        tol = torch.finfo(g.dtype).eps ** (1 / 3) if tol is None else tol
        if g.dtype in (torch.float16, torch.bfloat16):  # decided in float32, to the half dtype's tolerance
            g = g.float()
        finite = torch.isfinite(g).flatten(-2).all(-1)
        g = torch.where(finite[..., None, None], g, torch.eye(self.matrix_size, dtype=g.dtype, device=g.device))
        if self.has_chart_boundary:
            last = torch.zeros(self.matrix_size, dtype=g.dtype, device=g.device)
            last[-1] = 1
            ok = ((g[..., -1, :] - last).abs().amax(-1) <= tol) & (torch.linalg.det(g[..., :-1, :-1]) > 0)
        else:
            scale = g.abs().flatten(-2).amax(-1).clamp_min(1.0)
            ok = (self.exp(self.log(g)) - g).abs().flatten(-2).amax(-1) <= tol * scale
        return ok & finite

    def identity(self, *batch: int, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
        """Identity elements of shape ``(*batch, m, m)``."""
        eye = torch.eye(self.matrix_size, dtype=dtype, device=device)
        return eye.expand(*batch_shape(*batch), self.matrix_size, self.matrix_size).clone()

    @abstractmethod
    def random(
        self,
        *batch: int,
        generator: Optional[torch.Generator] = None,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> Tensor:
        """Random elements ``(*batch, m, m)`` (Haar on compact parts)."""

    # ------------------------------------------------------ homogeneous space
    def act(self, g: Tensor, x: Tensor) -> Tensor:
        """Action on the homogeneous space: ``g . x`` for points ``(..., n)``."""
        self._check_points(x, "x")
        n = self.space_dim
        if self.matrix_size == n:  # linear groups (SO(n))
            return (g @ x.unsqueeze(-1)).squeeze(-1)
        A = g[..., :n, :n]
        t = g[..., :n, n]
        return (A @ x.unsqueeze(-1)).squeeze(-1) + t

    def lift(
        self,
        points: Tensor,
        num_samples: int = 1,
        subgroup: Optional[Tensor] = None,
        generator: Optional[torch.Generator] = None,
    ) -> Tensor:
        """Lift points to group elements in ``s(x) H``.

        Args:
            points: ``(N, n)`` points of the homogeneous space.
            num_samples: number of random stabiliser samples per point
                (ignored when ``subgroup`` is given).
            subgroup: optional ``(K, k, k)`` matrices of a finite subgroup of the
                stabiliser ``H`` in its natural representation (``Cn(K).elements()``
                for SE2/SO3, a finite rotation group's ``elements()`` for SE3);
                :meth:`stabilizer_embed` places them in the group. Gives exactly
                ``K`` lifts per point.
            generator: random generator for the stabiliser samples.

        Returns:
            ``(N, K, m, m)`` group elements with ``g . o = x`` for the origin ``o``
            (``g . o = x / |x|`` for SO(n), whose orbits are spheres).
        """
        self._check_points(points, "points")
        if points.dim() != 2:
            raise ValueError(f"points must have shape (N, {self.space_dim}), got {tuple(points.shape)}")
        s = self.section(points)  # (N, m, m)
        if subgroup is not None:
            h = self.stabilizer_embed(subgroup.to(points.dtype).to(points.device))  # (K, m, m)
            return s.unsqueeze(1) @ h.unsqueeze(0)
        num_samples = positive_int("num_samples", num_samples)
        h = self.stabilizer_random(points.shape[0], num_samples, generator=generator,
                                   dtype=points.dtype, device=points.device)
        return s.unsqueeze(1) @ h

    @abstractmethod
    def section(self, points: Tensor) -> Tensor:
        """A section ``s(x)`` with ``s(x) . o = x``, ``(N, n) -> (N, m, m)``."""

    def origin(self, dtype=torch.float32, device=None) -> Tensor:
        """The base point ``o`` of the homogeneous space, shape ``(n,)``."""
        return torch.zeros(self.space_dim, dtype=dtype, device=device)

    def stabilizer_random(self, N: int, K: int, generator=None, dtype=torch.float32, device=None) -> Tensor:
        """``(N, K, m, m)`` random elements of the stabiliser ``H`` of the origin."""
        return self.identity(N, K, dtype=dtype, device=device)

    def stabilizer_embed(self, h: Tensor) -> Tensor:
        """Embed finite-subgroup elements of ``H`` as ``(K, m, m)`` group elements."""
        raise ValueError(f"{self.name} has a trivial stabiliser: finite-subgroup lifts are not defined")

    @property
    def stabilizer_dim(self) -> int:
        """Dimension of the stabiliser ``H`` (0 when lifts are unique)."""
        return 0

    def orbit_invariants(self, points: Tensor) -> Optional[Tensor]:
        """Invariants of the orbit of each point, ``(N, k)``, or ``None`` if transitive."""
        return None

    # ---------------------------------------------------------------- checks
    #: whether the group's maps take float16 / bfloat16 tensors (closed forms in elementwise
    #: torch operations, accurate to a few eps of the dtype, tested); groups whose maps need
    #: ``torch.linalg`` (no half-precision kernels) set it False and refuse them by name
    half_precision: bool = True

    def _check_dtype(self, t: Tensor, arg: str) -> None:
        if not t.dtype.is_floating_point:
            raise ValueError(f"{arg} must be a floating-point tensor, got {t.dtype}")
        if not self.half_precision and t.dtype in (torch.float16, torch.bfloat16):
            raise ValueError(f"{arg} is {t.dtype}, but {self.name}'s maps need torch.linalg, which has no "
                             f"float16/bfloat16 kernels; pass {arg}.float() (and cast the result back)")

    def _check_vec(self, xi: Tensor, arg: str) -> None:
        if not isinstance(xi, Tensor):
            raise ValueError(f"{arg} must be a torch.Tensor, got {type(xi).__name__}")
        if xi.dim() < 1 or xi.shape[-1] != self.dim:
            raise ValueError(
                f"{arg} must have trailing dimension {self.dim} (the {self.name} algebra), "
                f"got shape {tuple(xi.shape)}")
        self._check_dtype(xi, arg)

    def _check_mat(self, g: Tensor, arg: str, finite: bool = True) -> None:
        m = self.matrix_size
        if not isinstance(g, Tensor):
            raise ValueError(f"{arg} must be a torch.Tensor, got {type(g).__name__}")
        if g.dim() < 2 or g.shape[-2:] != (m, m):
            raise ValueError(
                f"{arg} must have trailing shape ({m}, {m}) for {self.name}, got {tuple(g.shape)}")
        self._check_dtype(g, arg)
        if finite and not tracing() and g.device.type != "meta" and not bool(torch.isfinite(g).all()):
            raise ValueError(f"{arg} contains non-finite entries (NaN or inf)")

    def _check_points(self, x: Tensor, arg: str) -> None:
        n = self.space_dim
        if not isinstance(x, Tensor):
            raise ValueError(f"{arg} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 1 or x.shape[-1] != n:
            raise ValueError(
                f"{arg} must have trailing dimension {n} ({self.name} acts on R^{n}), "
                f"got shape {tuple(x.shape)}")
        if not tracing() and x.device.type != "meta" and not bool(torch.isfinite(x).all()):
            raise ValueError(f"{arg} contains non-finite entries (NaN or inf)")

    def __repr__(self) -> str:
        return f"{self.name}()"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))


def skew2(theta: Tensor) -> Tensor:
    """``theta (..., ) -> [[0, -theta], [theta, 0]]`` of shape ``(..., 2, 2)``."""
    z = torch.zeros_like(theta)
    return torch.stack([torch.stack([z, -theta], -1), torch.stack([theta, z], -1)], -2)


def rot2(theta: Tensor) -> Tensor:
    """Rotation matrices ``(..., 2, 2)`` of angles ``(...)``."""
    c, s = torch.cos(theta), torch.sin(theta)
    return torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)


def skew3(w: Tensor) -> Tensor:
    """``w (..., 3) -> [w]_x (..., 3, 3)``."""
    x, y, z = w.unbind(-1)
    o = torch.zeros_like(x)
    return torch.stack([
        torch.stack([o, -z, y], -1),
        torch.stack([z, o, -x], -1),
        torch.stack([-y, x, o], -1),
    ], -2)


def homogeneous(A: Tensor, t: Tensor) -> Tensor:
    """Assemble ``[[A, t], [0, 1]]`` from ``A (..., n, n)`` and ``t (..., n)``."""
    n = A.shape[-1]
    top = torch.cat([A, t.unsqueeze(-1)], -1)
    bottom = torch.zeros(*A.shape[:-2], 1, n + 1, dtype=A.dtype, device=A.device)
    bottom[..., 0, n] = 1
    return torch.cat([top, bottom], -2)


def batch_shape(*batch: int | Sequence[int]) -> tuple[int, ...]:
    """Accept ``random(2, 3)`` as well as ``random((2, 3))``."""
    if len(batch) == 1 and isinstance(batch[0], (tuple, list, torch.Size)):
        return tuple(batch[0])
    return tuple(int(b) for b in batch)


CHART_MODES = ("mask", "error")


def chart_safe_log(group: LieGroup, rel: Tensor, chart: str = "mask",
                   what: str = "relative pose") -> Tuple[Tensor, Optional[Tensor]]:
    r"""``vee(log(rel))`` with the documented out-of-chart behaviour.

    Args:
        group: the group.
        rel: elements ``(E, m, m)``.
        chart: ``"mask"``: elements outside the principal chart (only groups with
            ``has_chart_boundary``, the affine groups, have any) get zero
            coordinates from ``group.masked_log`` and are flagged invalid, with a
            ``RuntimeWarning``;
            ``"error"``: raise ``ValueError``.
        what: noun used in the messages.

    Returns:
        ``(w, valid)``: ``w (E, dim)`` and ``valid (E,)`` bool, or ``None`` when the
        group has no chart boundary (every element valid).
    """
    if chart not in CHART_MODES:
        raise ValueError(f"chart must be one of {CHART_MODES}, got {chart!r}")
    if not group.has_chart_boundary:
        return group.log(rel), None
    w, valid = group.masked_log(rel)  # zeros (and zero gradient) outside the chart
    if not tracing():
        n_bad = int((~valid).sum())
        if n_bad:
            if chart == "error":
                raise ValueError(
                    f"{n_bad} {what}(s) lie outside the principal log chart of {group.name} "
                    "(linear part with an eigenvalue on (-inf, 0]); use chart='mask' to drop them "
                    "from the attention, or use smaller relative poses / a sparser graph")
            warnings.warn(
                f"{n_bad} {what}(s) outside the principal log chart of {group.name} were masked "
                "(they get no attention weight)", RuntimeWarning, stacklevel=3)
    return w, valid
