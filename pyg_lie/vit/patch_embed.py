"""G-patchified grids (the paper's Definition 3) and the equivariant patch embedding.

A grid is ``H_0 = U + H``: the base patch ``U`` and the patch centres ``H`` are
G-stable finite point sets. Points are stored in integer lattice coordinates so
the group acts by exact integer matrices:

* :class:`SquareGrid` (subgroups of ``D4``): doubled pixel coordinates
  ``(2j - (S-1), (S-1) - 2i)`` of pixel ``(i, j)`` (x right, y up), so an image
  ``(B, C, S, S)`` is the flat pixel tensor ``(B, C, S*S)`` in row-major order.
* :class:`HexGrid` (subgroups of ``D6``): hexagonal lattice ``m a1 + n a2`` with
  ``a1 = (1, 0)``, ``a2 = (1/2, sqrt(3)/2)``; the base patch is the hexagon with
  ``N2`` points per side (``3 N2 (N2-1) + 1`` pixels), the centres form a hexagon
  with ``N1`` points per side on the lattice spanned by ``(N2-1)(a1 + a2)`` and
  ``(N2-1)(2 a2 - a1)``, so neighbouring patches share their boundary edge (the
  paper's ``N1 = N2 = 9``: 217 patches of 217 pixels, 42,073 pixels in all).
  Square images are resampled onto ``H_0`` bilinearly.

The patch embedding (Section 4.2.1) is ``Id_H (x) l`` with
``l in Hom_G(C(U, R^c), V)``: ``C(U)`` is decomposed orbit by orbit (each G-orbit of
pixels is a homogeneous space) into an orthonormal Fourier basis
``E^rho_{alpha j}``, then a Schur linear layer mixes the ``c * nu_rho`` copies of
each irrep into ``C_rho`` output channels. This spans the full ``Hom_G`` space.

Pixels may also carry features of a field type ``W`` (``pixel_type``, e.g. the regular
fields an escnn convolution computes): then ``C(U, W) = C(U) (x) W`` is decomposed, one
irrep ``sigma`` of ``W`` at a time, by an orthonormal change of basis onto irreps of ``G``
(numerical intertwiners of ``P_U (x) sigma``), followed by the same Schur layer.
"""
from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _checks
from ..groups.finite import FiniteO2Group, o2_group
from ..groups.finite_reps import GSet, intertwiners
from .field_type import FieldType
from .linear import EquivariantLinear

__all__ = ["SquareGrid", "HexGrid", "make_grid", "EquivariantPatchEmbed", "rot_flip_image"]


def rot_flip_image(images: Tensor, group: Union[str, FiniteO2Group], g: int) -> Tensor:
    """Act with ``g = r^k t^f`` of a subgroup of ``D4`` on square images ``(..., S, S)``:
    ``t`` flips the y-axis (the rows), then ``k`` turns by ``360/n`` degrees counter-clockwise
    (``torch.rot90``). Equal to :meth:`SquareGrid.transform_pixels` on flat pixels."""
    G = o2_group(group)
    if 4 % G.n:
        raise ValueError(f"group: {G.name} does not act on square images")
    f, k = G.pairs[g]
    x = images.flip(-2) if f else images
    return torch.rot90(x, k * 4 // G.n, dims=(-2, -1))


class _Grid:
    """Common part of square and hexagonal grids (points in integer lattice coords)."""

    kind = "grid"
    basis = np.eye(2)  # lattice coords -> plane coords

    def _setup(self, group: FiniteO2Group, U: np.ndarray, centers: np.ndarray, pixels: Optional[np.ndarray] = None):
        self.group = group
        self.U = U.astype(np.int64)
        self.centers = centers.astype(np.int64)
        if pixels is None:
            allp = (self.centers[:, None, :] + self.U[None, :, :]).reshape(-1, 2)
            pixels = np.unique(allp, axis=0)
        self.pixels = pixels.astype(np.int64)
        self.lattice_actions = [self._lattice_action(g) for g in range(group.order)]
        pidx = self._lookup(self.pixels, (self.centers[:, None, :] + self.U[None, :, :]).reshape(-1, 2))
        self.patch_index = pidx.reshape(len(self.centers), len(self.U))
        self.num_pixels, self.num_patches, self.patch_pixels = len(self.pixels), len(self.centers), len(self.U)
        self.pixel_perms = np.stack([self._perm(self.pixels, g) for g in range(group.order)])
        self.patch_perms = np.stack([self._perm(self.centers, g) for g in range(group.order)])
        self.U_perms = np.stack([self._perm(self.U, g) for g in range(group.order)])

    @staticmethod
    def _lookup(table: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Index in ``table`` of every integer point of ``query`` (vectorised)."""
        off = int(max(np.abs(table).max(), np.abs(query).max())) + 1
        key = lambda p: (p[:, 0] + off) * (2 * off + 1) + (p[:, 1] + off)
        kt, kq = key(table), key(query)
        order = np.argsort(kt)
        pos = np.searchsorted(kt[order], kq).clip(0, len(kt) - 1)
        found = kt[order][pos] == kq
        if not found.all():
            raise KeyError("point not in table")
        return order[pos]

    def _lattice_action(self, g: int) -> np.ndarray:
        B = self.basis
        A = np.linalg.inv(B) @ self.group.plane_matrix(g) @ B
        Ai = np.rint(A)
        if np.abs(A - Ai).max() > 1e-9:
            raise ValueError(f"group: {self.group.name} does not act on the {self.kind} grid")
        return Ai.astype(np.int64)

    def _perm(self, pts: np.ndarray, g: int) -> np.ndarray:
        """``perm[x] = index of g . pts[x]``."""
        try:
            return self._lookup(pts, pts @ self.lattice_actions[g].T)
        except KeyError:
            raise ValueError(f"group: the {self.kind} grid is not stable under {self.group.name}") from None

    def plane_coords(self, pts: np.ndarray) -> np.ndarray:
        return pts @ self.basis.T

    def center_positions(self) -> np.ndarray:
        """Patch centres in plane coordinates (pixel units), ``(num_patches, 2)``."""
        return self.plane_coords(self.centers)

    def transform_pixels(self, x: Tensor, g: int) -> Tensor:
        """``(g . I)(p) = I(g^{-1} p)`` on flat pixel tensors ``(..., num_pixels)``."""
        out = torch.empty_like(x)
        out[..., torch.as_tensor(self.pixel_perms[g], device=x.device)] = x
        return out

    def transform_tokens(self, x: Tensor, V: FieldType, g: int) -> Tensor:
        """``(g . x)(a) = rho_V(g) x(g^{-1} a)`` on patch tokens ``(B, num_patches, V.dim)``."""
        y = V.transform(x, g)
        out = torch.empty_like(y)
        out[..., torch.as_tensor(self.patch_perms[g], device=x.device), :] = y
        return out


class SquareGrid(_Grid):
    """Square image ``S x S`` cut into ``(S/P)^2`` patches of ``P x P`` pixels (Eq. 1).

    Raises:
        ValueError: if ``img_size`` is not divisible by ``patch_size`` or the group is
            not a subgroup of ``D4``.
    """

    kind = "square"

    def __init__(self, group: Union[str, FiniteO2Group], img_size: int, patch_size: int):
        group = o2_group(group)
        img_size = _checks.positive_int("img_size", img_size)
        patch_size = _checks.positive_int("patch_size", patch_size)
        if 4 % group.n != 0:
            raise ValueError(f"group: {group.name} is not a subgroup of D4; on grid='square' use one of "
                             "C1, C2, C4, D1, D2, D4 (or grid='hex' for C3, C6, D3, D6)")
        if patch_size < 1 or img_size % patch_size != 0:
            raise ValueError(f"img_size: {img_size} is not divisible by patch_size={patch_size}; "
                             f"choose img_size as a multiple of patch_size (e.g. {max(1, img_size // max(patch_size, 1)) * patch_size})")
        self.img_size, self.patch_size = img_size, patch_size
        S, P = img_size, patch_size
        U = np.array([(2 * uj - (P - 1), (P - 1) - 2 * ui) for ui in range(P) for uj in range(P)])
        q = S // P
        centers = np.array([(2 * pj * P + P - S, S - P - 2 * pi * P) for pi in range(q) for pj in range(q)])
        pixels = np.array([(2 * j - (S - 1), (S - 1) - 2 * i) for i in range(S) for j in range(S)])
        self._setup(group, U, centers, pixels)

    def plane_coords(self, pts: np.ndarray) -> np.ndarray:
        return pts / 2.0

    def to_pixels(self, images: Tensor) -> Tensor:
        """``(B, C, S, S)`` to flat pixels ``(B, C, S*S)``."""
        if images.dim() != 4 or images.shape[-1] != self.img_size or images.shape[-2] != self.img_size:
            raise ValueError(f"images: expected (B, C, {self.img_size}, {self.img_size}), got {tuple(images.shape)}")
        return images.flatten(-2)


class HexGrid(_Grid):
    """Hexagonal patches on a hexagonal lattice of patches (subgroups of ``D6``).

    Args:
        group: a subgroup of ``D6`` (``C1, C2, C3, C6, D1, D2, D3, D6``).
        img_size: side of the square input images that are resampled onto the grid.
        patch_side: ``N2``, pixels on each side of a hexagonal patch (``>= 2``).
        patches_side: ``N1``, patches on each side of the hexagon of patches.
    """

    kind = "hex"
    basis = np.array([[1.0, 0.5], [0.0, math.sqrt(3) / 2]])

    def __init__(self, group: Union[str, FiniteO2Group], img_size: int, patch_side: int, patches_side: int = 3):
        group = o2_group(group)
        img_size = _checks.positive_int("img_size", img_size)
        patch_side = _checks.positive_int("patch_size", patch_side)
        patches_side = _checks.positive_int("patches_side", patches_side)
        if 6 % group.n != 0:
            raise ValueError(f"group: {group.name} is not a subgroup of D6; on grid='hex' use one of "
                             "C1, C2, C3, C6, D1, D2, D3, D6 (or grid='square' for C4, D4)")
        if patch_side < 2 or patches_side < 1:
            raise ValueError(f"patch_size: hexagonal patches need patch_size (points per side) >= 2 and "
                             f"patches_side >= 1, got {patch_side}, {patches_side}")
        self.img_size, self.patch_size, self.patches_side = img_size, patch_side, patches_side
        R2, R1 = patch_side - 1, patches_side - 1
        hexpts = lambda R: np.array([(m, n) for n in range(-R, R + 1) for m in range(-R, R + 1) if abs(m + n) <= R])
        U = hexpts(R2)
        h = hexpts(R1)
        centers = h[:, :1] * np.array([R2, R2]) + h[:, 1:] * np.array([-R2, 2 * R2])
        self._setup(group, U, centers)
        xy = self.plane_coords(self.pixels)
        half = (img_size - 1) / 2.0
        if img_size < 2:
            raise ValueError("img_size: must be >= 2 for the hexagonal grid")
        scale = half / np.abs(xy).max()
        grid = np.stack([xy[:, 0] * scale / half, -xy[:, 1] * scale / half], -1)  # grid_sample (x, y)
        self._sample_grid = torch.as_tensor(grid, dtype=torch.float64)

    def to_pixels(self, images: Tensor) -> Tensor:
        """Bilinear resampling of ``(B, C, S, S)`` images onto the hex pixels ``(B, C, N)``;
        tensors already of shape ``(B, C, num_pixels)`` pass through."""
        if images.dim() == 3 and images.shape[-1] == self.num_pixels:
            return images
        if images.dim() != 4 or images.shape[-1] != self.img_size or images.shape[-2] != self.img_size:
            raise ValueError(f"images: expected (B, C, {self.img_size}, {self.img_size}) or hex pixels "
                             f"(B, C, {self.num_pixels}), got {tuple(images.shape)}")
        grid = self._sample_grid.to(images.device, images.dtype)[None, None].expand(images.shape[0], 1, -1, 2)
        return F.grid_sample(images, grid, mode="bilinear", align_corners=True).squeeze(-2)


def make_grid(group: Union[str, FiniteO2Group], grid: str, img_size: int, patch_size: int, patches_side: int = 3):
    if grid == "square":
        return SquareGrid(group, img_size, patch_size)
    if grid in ("hex", "hexagonal"):
        return HexGrid(group, img_size, patch_size, patches_side)
    raise ValueError(f"grid: must be 'square' or 'hex', got {grid!r}")


def patch_fourier_basis(grid: _Grid) -> dict[str, np.ndarray]:
    """Orbit-by-orbit orthonormal basis ``E[rho]`` of ``C(U)``, shape ``(nu_rho, d_rho, |U|)``."""
    G = grid.group
    Uset = GSet(G, grid.U_perms)
    out: dict[str, list] = {r.name: [] for r in G.irreps}
    for orb in Uset.orbits():
        loc = {x: i for i, x in enumerate(orb)}
        sub = GSet(G, np.array([[loc[int(grid.U_perms[g, x])] for x in orb] for g in range(G.order)]))
        for name, Q in sub.fourier_basis().items():
            for a in range(Q.shape[0]):
                E = np.zeros((Q.shape[1], grid.patch_pixels))
                E[:, orb] = Q[a]
                out[name].append(E)
    return {k: (np.stack(v) if v else np.zeros((0, G.irrep(k).dim, grid.patch_pixels))) for k, v in out.items()}


def pixel_type_basis(grid: _Grid, pixel_type: FieldType) -> tuple[FieldType, np.ndarray]:
    """``(T, Q)``: the irreps ``T`` of ``C(U, W)`` for pixels of field type ``W`` and the
    orthogonal ``(T.dim, W.dim * |U|)`` change of basis (columns channel-major: feature
    ``i`` of pixel ``u`` is column ``i * |U| + u``) with ``rho_T(g) Q = Q (rho_W(g) (x) P_U(g))``."""
    G = grid.group
    if pixel_type.group != G:
        raise ValueError(f"pixel_type: its group {pixel_type.group.name} is not the grid's {G.name}")
    U = grid.patch_pixels
    PU = GSet(G, grid.U_perms).perm_matrices(G.generator_indices)
    rows: dict[str, list] = {r.name: [] for r in G.irreps}
    for sigma, C, sl in pixel_type.blocks:
        if C == 0:
            continue
        d = sigma.dim
        pi = np.stack([np.kron(sigma.matrix(*G.pairs[g]), P) for g, P in zip(G.generator_indices, PU)])
        for rho in G.irreps:
            M = intertwiners(pi, rho, np.stack([rho.matrix(*G.pairs[g]) for g in G.generator_indices]))
            for c in range(C):
                lo = (sl.start + c * d) * U
                for a in range(M.shape[0]):
                    row = np.zeros((rho.dim, pixel_type.dim * U))
                    row[:, lo: lo + d * U] = M[a].T
                    rows[rho.name].append(row)
    T = FieldType(G, {k: len(v) for k, v in rows.items()})
    Q = np.concatenate([np.concatenate(v, 0) for v in rows.values() if v], 0)
    if Q.shape != (pixel_type.dim * U, pixel_type.dim * U) or not np.allclose(Q @ Q.T, np.eye(len(Q)), atol=1e-8):
        raise RuntimeError(f"pixel_type: the decomposition of C(U, {pixel_type}) into irreps is incomplete")
    return T, Q


class EquivariantPatchEmbed(nn.Module):
    """Equivariant patch embedding ``C(H_0, R^c) -> C(H, V)`` (Eq. 7).

    Args:
        grid: a :class:`SquareGrid` or :class:`HexGrid`.
        in_channels: ``c`` (3 for RGB).
        out_type: the token field type ``V``.
        bias: bias on the trivial irrep.
        pixel_type: the field type ``W`` of each pixel's features (default: ``c`` trivial
            channels); ``in_channels`` must be ``W.dim``. Then the layer spans
            ``Hom_G(C(U, W), V)`` (see :func:`pixel_type_basis`).

    Shapes:
        input flat pixels ``(B, c, num_pixels)``, output ``(B, num_patches, V.dim)``.
    """

    def __init__(self, grid: _Grid, in_channels: int, out_type: FieldType, bias: bool = True,
                 blockwise: bool = True, pixel_type: Optional[FieldType] = None):
        super().__init__()
        in_channels = _checks.positive_int("in_channels", in_channels)
        if pixel_type is not None:
            if pixel_type.dim != in_channels:
                raise ValueError(f"in_channels: must equal pixel_type.dim = {pixel_type.dim}, got {in_channels}")
            if pixel_type == FieldType.trivial(grid.group, in_channels):
                pixel_type = None  # plain channels: the orbit-by-orbit path below
        self.grid, self.in_channels, self.out_type, self.blockwise = grid, in_channels, out_type, blockwise
        self.pixel_type = pixel_type
        if pixel_type is not None:
            self.in_type, Q = pixel_type_basis(grid, pixel_type)
            self.register_buffer("basis", torch.as_tensor(Q, dtype=torch.float64), persistent=False)
            self.register_buffer("patch_index", torch.as_tensor(grid.patch_index), persistent=False)
            self.linear = EquivariantLinear(self.in_type, out_type, bias=bias)
            return
        E = patch_fourier_basis(grid)
        self.nu = {k: v.shape[0] for k, v in E.items()}
        self.in_type = FieldType(grid.group, {k: in_channels * v for k, v in self.nu.items()})
        rows, meta = [], []  # in_type layout: per irrep, channel (c, alpha), component j
        for r in grid.group.irreps:
            Er = E[r.name]
            for c in range(in_channels):
                for a in range(Er.shape[0]):
                    for j in range(r.dim):
                        row = np.zeros((in_channels, grid.patch_pixels))
                        row[c] = Er[a, j]
                        rows.append(row.reshape(-1))
                        meta.append((c, Er.shape[0] * r.dim))
        basis = np.stack(rows)  # (in_type.dim, c * |U|), orthogonal
        self.register_buffer("basis", torch.as_tensor(basis, dtype=torch.float64), persistent=False)
        self.register_buffer("patch_index", torch.as_tensor(grid.patch_index), persistent=False)
        self.linear = EquivariantLinear(self.in_type, out_type, bias=bias)
        # block-wise Fourier transform of C(U): one (m x m) block per pixel orbit of size m
        U = grid.patch_pixels
        ch0 = [i for i, (c, _) in enumerate(meta) if c == 0]
        by_size: dict[int, list] = {}
        for orb in GSet(grid.group, grid.U_perms).orbits():
            rs = [i for i in ch0 if np.abs(basis[i, orb]).sum() > 1e-12]
            by_size.setdefault(len(orb), []).append((orb, rs, basis[np.ix_(rs, orb)]))
        order = []
        self._sizes = []
        for m, items in sorted(by_size.items()):
            i = len(self._sizes)
            self.register_buffer(f"orb_pix{i}", torch.as_tensor([o for o, _, _ in items]), persistent=False)
            self.register_buffer(f"orb_Q{i}", torch.as_tensor(np.stack([q for _, _, q in items])), persistent=False)
            self._sizes.append((len(items), m))
            for c in range(in_channels):  # coefficient layout of the pieces: (c, orbit, row)
                for _, rs, _ in items:
                    order += [r + c * meta[r][1] for r in rs]
        perm = torch.as_tensor(order)
        assert perm.numel() == self.in_type.dim == in_channels * U
        self.register_buffer("coef_scatter", torch.argsort(perm), persistent=False)

    def reset_parameters(self) -> None:
        self.linear.reset_parameters()

    def filters(self) -> Tensor:
        """Dense equivalent filter bank ``(V.dim, c * |U|)`` (channel-major pixels)."""
        W = self.linear.dense_weight()
        return W @ self.basis.to(W.dtype)

    def fourier(self, patches: Tensor) -> Tensor:
        """Block-wise ``C(U, R^c) -> (+)_rho R^{c nu_rho} (x) V_rho``: ``(..., c, |U|) -> (..., in_type.dim)``."""
        pieces = []
        for i, (K, m) in enumerate(self._sizes):
            Q = getattr(self, f"orb_Q{i}").to(patches.dtype)  # (K, m, m)
            xg = patches[..., getattr(self, f"orb_pix{i}")]  # (..., c, K, m)
            pieces.append(torch.einsum("...km,kqm->...kq", xg, Q).flatten(-3))
        return torch.cat(pieces, -1).index_select(-1, self.coef_scatter)

    def forward(self, pixels: Tensor) -> Tensor:
        B, c = pixels.shape[0], pixels.shape[1]
        if c != self.in_channels:
            raise ValueError(f"pixels: expected {self.in_channels} channels, got {c}")
        patches = pixels[:, :, self.patch_index].transpose(1, 2)  # (B, Np, c, |U|)
        if self.pixel_type is not None:
            return self.linear(patches.flatten(-2) @ self.basis.to(patches.dtype).T)
        if self.blockwise:
            return self.linear(self.fourier(patches))
        return F.linear(patches.reshape(B, self.grid.num_patches, -1), self.filters().to(patches.dtype),
                        self.linear.dense_bias())

    def macs_per_token(self) -> int:
        if self.pixel_type is not None:
            return self.basis.numel() + self.linear.macs_per_token()
        if self.blockwise:
            return self.in_channels * sum(K * m * m for K, m in self._sizes) + self.linear.macs_per_token()
        return self.out_type.dim * self.in_channels * self.grid.patch_pixels
