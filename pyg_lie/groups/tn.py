"""T(n): translations of R^n as (n+1) x (n+1) homogeneous matrices."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .base import LieGroup, LogNormEmbedding, batch_shape, homogeneous


class Tn(LieGroup):
    """Translation group ``T(n) = {[[I, t], [0, 1]]}`` acting on ``R^n``.

    Algebra coordinates are the translation ``t`` itself (block ``translation``);
    ``exp`` and ``log`` are exact. ``random`` draws ``t ~ N(0, scale^2 I)``.
    The stabiliser is trivial, so every point has exactly one lift.
    """

    compact = False

    def __init__(self, n: int = 2):
        if n not in (1, 2, 3):
            raise ValueError(f"Tn supports n in (1, 2, 3), got n={n}")
        self.n = n
        self.name = f"T{n}"
        self.matrix_size = n + 1
        self.dim = n
        self.space_dim = n
        self.blocks = {"translation": slice(0, n)}

    def basis(self, dtype=torch.float64, device=None) -> Tensor:
        n = self.n
        E = torch.zeros(n, n + 1, n + 1, dtype=dtype, device=device)
        for k in range(n):
            E[k, k, n] = 1.0
        return E

    def exp(self, xi: Tensor) -> Tensor:
        self._check_vec(xi, "xi")
        eye = torch.eye(self.n, dtype=xi.dtype, device=xi.device).expand(*xi.shape[:-1], self.n, self.n)
        return homogeneous(eye, xi)

    def log(self, g: Tensor) -> Tensor:
        self._check_mat(g, "g")
        return g[..., : self.n, self.n]

    def inv(self, g: Tensor) -> Tensor:
        return self.exp(-g[..., : self.n, self.n])

    def relative_log(self, g: Tensor, edge_index: Tensor, one_sided_cut: bool = False) -> Tensor:
        """:meth:`LieGroup.relative_log` as ``t_j - t_i`` from the translation columns (no
        ``(E, n + 1, n + 1)`` products); ``one_sided_cut`` has nothing to do (no rotation)."""
        if g.dim() != 3:
            return super().relative_log(g, edge_index, one_sided_cut)
        self._check_mat(g, "g")
        t = g[:, : self.n, self.n].contiguous()  # index_select on the strided column is ~40x slower
        return t.index_select(0, edge_index[0]) - t.index_select(0, edge_index[1])

    def between(self, g: Tensor, h: Tensor) -> Tensor:
        return self.exp(h[..., : self.n, self.n] - g[..., : self.n, self.n])

    def log_norm_embedding(self, g: Tensor) -> LogNormEmbedding:
        """``e = t``: the log-norm is the Euclidean distance, ``L = U = 1``.

        Args:
            g: ``(..., n+1, n+1)`` elements.

        Returns:
            :class:`~pyg_lie.groups.base.LogNormEmbedding`, ``embedding (..., n)``.
        """
        self._check_mat(g, "g")
        return LogNormEmbedding(g[..., : self.n, self.n], 1.0, 1.0)

    def random(self, *batch, generator: Optional[torch.Generator] = None,
               dtype=torch.float32, device=None, scale: float = 1.0) -> Tensor:
        shape = batch_shape(*batch)
        t = scale * torch.randn(*shape, self.n, generator=generator, dtype=torch.float64)
        return self.exp(t).to(dtype=dtype, device=device)

    def section(self, points: Tensor) -> Tensor:
        return self.exp(points)

    def lift(self, points: Tensor, num_samples: int = 1, subgroup=None, generator=None) -> Tensor:
        if subgroup is not None or num_samples != 1:
            raise ValueError(
                f"{self.name} has a trivial stabiliser: use num_samples=1 and no subgroup "
                f"(got num_samples={num_samples}, subgroup={'given' if subgroup is not None else None})")
        return super().lift(points, 1)

    def __repr__(self) -> str:
        return f"Tn({self.n})"
