"""G-invariant learnable absolute positional encodings (the paper's Section 4.2.2).

``PosEnc(x) = x + p`` is equivariant iff ``rho(g) p^rho(g^{-1} a) = p^rho(a)``. The
invariant subspace of ``R^H (x) V_rho`` is computed orbit by orbit over the patch
centres; ``p^rho = sum_k w_{c k} B_k`` with learnable ``w`` of shape ``(C_rho, K_rho)``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from .field_type import FieldType
from .. import _checks
from ..groups.finite_reps import invariant_subspace

__all__ = ["InvariantPositionalEncoding", "invariant_position_basis"]


def invariant_position_basis(patch_perms: np.ndarray, V: FieldType) -> dict[str, np.ndarray]:
    """``{irrep: B}`` with ``B`` of shape ``(K_rho, num_patches, d_rho)``, orthonormal."""
    G = V.group
    Np = patch_perms.shape[1]
    out = {}
    seen: set[int] = set()
    orbits = []
    for a in range(Np):
        if a not in seen:
            orb = sorted(set(patch_perms[:, a].tolist()))
            seen.update(orb)
            orbits.append(orb)
    for r in G.irreps:
        vecs = []
        for orb in orbits:
            loc = {x: i for i, x in enumerate(orb)}
            mats = []
            for g in G.generator_indices:
                P = np.zeros((len(orb), len(orb)))
                for x in orb:
                    P[loc[int(patch_perms[g, x])], loc[x]] = 1.0
                mats.append(np.kron(P, r.matrix(*G.pairs[g])))
            for v in invariant_subspace(np.stack(mats)):
                full = np.zeros((Np, r.dim))
                full[orb] = v.reshape(len(orb), r.dim)
                vecs.append(full)
        out[r.name] = np.stack(vecs) if vecs else np.zeros((0, Np, r.dim))
    return out


class InvariantPositionalEncoding(nn.Module):
    """Adds a learnable G-invariant ``p in C(H, V)`` to patch tokens.

    Args:
        patch_perms: ``(|G|, num_patches)`` action of ``G`` on the patch centres.
        field_type: ``V``.
        init_std: standard deviation of the initial weights.

    Shapes:
        input/output ``(B, num_patches, V.dim)``.
    """

    def __init__(self, patch_perms: np.ndarray, field_type: FieldType, init_std: float = 0.02):
        super().__init__()
        init_std = _checks.nonnegative_float("init_std", init_std)
        self.field_type, self.init_std = field_type, init_std
        self.num_patches = patch_perms.shape[1]
        basis = invariant_position_basis(np.asarray(patch_perms), field_type)
        self.weights = nn.ParameterDict()
        for r, C, _ in field_type.blocks:
            B = basis[r.name]
            if C and B.shape[0]:
                self.register_buffer(f"basis_{r.name}", torch.as_tensor(B, dtype=torch.float64), persistent=False)
                self.weights[r.name] = nn.Parameter(torch.empty(C, B.shape[0]))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for p in self.weights.values():
            nn.init.normal_(p, std=self.init_std)

    def encoding(self) -> Tensor:
        """The invariant encoding ``p`` of shape ``(num_patches, V.dim)``."""
        ref = next(iter(self.weights.values()))
        parts = []
        for r, C, _ in self.field_type.blocks:
            if r.name in self.weights:
                B = getattr(self, f"basis_{r.name}").to(ref.dtype)
                parts.append(torch.einsum("ck,kad->acd", self.weights[r.name], B).reshape(self.num_patches, -1))
            else:
                parts.append(ref.new_zeros(self.num_patches, C * r.dim))
        return torch.cat(parts, dim=-1)

    @torch.no_grad()
    def load_encoding(self, p: Tensor) -> float:
        """Project a given ``p`` onto the invariant span; returns the relative residual."""
        parts = self.field_type.split(p)
        for (r, C, _), pr in zip(self.field_type.blocks, parts):
            if r.name in self.weights:
                B = getattr(self, f"basis_{r.name}").to(p.dtype)
                self.weights[r.name].copy_(torch.einsum("acd,kad->ck", pr, B).to(self.weights[r.name]))
        return float((p - self.encoding().to(p)).norm() / p.norm().clamp_min(1e-30))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.encoding().to(x.dtype)
