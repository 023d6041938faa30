"""Equivariant linear layers by Schur's lemma (the paper's Eq. 4-5).

``Hom_G(V', V'') = (+)_rho Mat_{C''_rho x C'_rho}(R) (x) End_G(V_rho)``: the layer is
irrep-wise, ``y^rho = sum_mu (w_mu (x) L_mu) x^rho`` with ``L = {I}`` for real-type
irreps and ``L = {I, J}`` for the complex-type 2-d irreps of ``C_n``; a bias is only
allowed on the trivial irrep. It is computed block by block (one GEMM per irrep), so
the multiply-adds are ``sum_rho d_rho dimEnd_rho C''_rho C'_rho`` per token instead of
``dim V'' dim V'`` for a dense layer: the FLOP savings are real.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _checks
from .field_type import FieldType

__all__ = ["EquivariantLinear"]


class EquivariantLinear(nn.Module):
    """``G``-equivariant affine map ``V' -> V''`` (Schur parametrisation).

    Args:
        in_type: ``V'``.
        out_type: ``V''`` (same group).
        bias: add a learnable bias on the trivial irrep of ``V''``.

    Shapes:
        input ``(..., in_type.dim)``, output ``(..., out_type.dim)``.
    """

    def __init__(self, in_type: FieldType, out_type: FieldType, bias: bool = True):
        if not isinstance(in_type, FieldType) or not isinstance(out_type, FieldType):
            raise ValueError(f"in_type and out_type must be FieldTypes, got {type(in_type).__name__} and "
                             f"{type(out_type).__name__}")
        super().__init__()
        if in_type.group != out_type.group:
            raise ValueError(f"out_type: group {out_type.group.name} differs from in_type's {in_type.group.name}")
        self.in_type, self.out_type = in_type, out_type
        self.weights = nn.ParameterDict()
        for (r, Ci, _), (_, Co, _) in zip(in_type.blocks, out_type.blocks):
            if Ci and Co:
                self.weights[r.name] = nn.Parameter(torch.empty(r.end_dim, Co, Ci))
        Ct = out_type.blocks[0][1]
        self.bias = nn.Parameter(torch.empty(Ct)) if (bias and Ct) else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for (r, Ci, _) in self.in_type.blocks:
            if r.name in self.weights:
                bound = 1.0 / math.sqrt(Ci * r.end_dim)
                nn.init.uniform_(self.weights[r.name], -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_type} -> {self.out_type}, bias={self.bias is not None}"

    # --------------------------------------------------------------- forward
    def forward(self, x: Tensor) -> Tensor:
        xs = self.in_type.split(x)
        lead = x.shape[:-1]
        outs = []
        for (r, Co, _), xr in zip(self.out_type.blocks, xs):
            if Co == 0:
                continue
            if r.name not in self.weights:
                outs.append(x.new_zeros(*lead, Co * r.dim))
                continue
            W = self.weights[r.name]
            if r.dim == 1:
                y = F.linear(xr.squeeze(-1), W[0])
            elif r.kind == "real":
                y = F.linear(xr.transpose(-1, -2), W[0]).transpose(-1, -2).reshape(*lead, Co * 2)
            else:  # complex type: W0 x + W1 J x,  J (x0, x1) = (-x1, x0)
                z = F.linear(xr.transpose(-1, -2), W.reshape(2 * Co, -1))  # (..., 2, 2Co)
                y0 = z[..., 0, :Co] - z[..., 1, Co:]
                y1 = z[..., 1, :Co] + z[..., 0, Co:]
                y = torch.stack([y0, y1], dim=-1).reshape(*lead, Co * 2)
            if r.is_trivial and self.bias is not None:
                y = y + self.bias
            outs.append(y)
        if not outs:
            return x.new_zeros(*lead, 0)
        return torch.cat(outs, dim=-1)

    # ----------------------------------------------------------- bookkeeping
    def macs_per_token(self) -> int:
        """Multiply-adds per token: ``sum_rho d_rho dimEnd_rho C''_rho C'_rho``."""
        total = 0
        for (r, Ci, _), (_, Co, _) in zip(self.in_type.blocks, self.out_type.blocks):
            total += r.dim * r.end_dim * Co * Ci
        return total

    def dense_weight(self) -> Tensor:
        """The equivalent dense matrix ``(out.dim, in.dim)``."""
        ref = next(iter(self.weights.values())) if len(self.weights) else torch.zeros(0)
        M = ref.new_zeros(self.out_type.dim, self.in_type.dim)
        for (r, _, si), (_, _, so) in zip(self.in_type.blocks, self.out_type.blocks):
            if r.name in self.weights:
                L = torch.as_tensor(r.end_basis(), dtype=M.dtype, device=M.device)
                W = self.weights[r.name]
                M[so, si] = sum(torch.kron(W[m], L[m]) for m in range(r.end_dim))
        return M

    def dense_bias(self) -> Optional[Tensor]:
        if self.bias is None:
            return None
        b = self.bias.new_zeros(self.out_type.dim)
        b[self.out_type.trivial_slice] = self.bias
        return b

    @torch.no_grad()
    def load_dense(self, M: Tensor, b: Optional[Tensor] = None) -> float:
        """Set the weights to the Schur projection of a dense ``(out.dim, in.dim)`` matrix
        (and bias); returns the relative residual ``||M - P(M)|| / ||M||`` (0 iff ``M`` is
        equivariant)."""
        for (r, Ci, si), (_, Co, so) in zip(self.in_type.blocks, self.out_type.blocks):
            if r.name not in self.weights:
                continue
            blk = M[so, si].reshape(Co, r.dim, Ci, r.dim)
            L = torch.as_tensor(r.end_basis(), dtype=M.dtype, device=M.device)
            w = torch.einsum("ojik,mjk->moi", blk, L) / r.dim
            self.weights[r.name].copy_(w.to(self.weights[r.name]))
        resid = (M - self.dense_weight().to(M)).norm() / M.norm().clamp_min(1e-30)
        if b is not None and self.bias is not None:
            self.bias.copy_(b[self.out_type.trivial_slice].to(self.bias))
            rb = b.clone()
            rb[self.out_type.trivial_slice] = 0
            resid = resid + rb.norm() / b.norm().clamp_min(1e-30)
        return float(resid)


class EquivariantRMSNorm(nn.Module):
    """Equivariant normalisation ``y = s (x) x / sqrt(mean(x^2) + eps) + b``.

    ``mean(x^2)`` is G-invariant (orthogonal irreps); the scale ``s`` is one learnable
    number per irrep channel (it commutes with ``rho``) and the bias ``b`` lives on the
    trivial irrep only. No mean subtraction, so the layer also survives restriction to
    subgroups unchanged (Theorem 2).

    Shapes:
        input/output ``(..., V.dim)``.
    """

    def __init__(self, field_type: FieldType, eps: float = 1e-6, affine: bool = True):
        super().__init__()
        eps = _checks.positive_float("eps", eps)
        self.field_type, self.eps = field_type, eps
        idx = []
        ch = 0
        for r, C, _ in field_type.blocks:
            for c in range(C):
                idx += [ch + c] * r.dim
            ch += C
        self.register_buffer("channel_of_feature", torch.as_tensor(idx, dtype=torch.long), persistent=False)
        self.num_channels = ch
        Ct = field_type.blocks[0][1]
        self.weight = nn.Parameter(torch.ones(ch)) if affine else None
        self.bias = nn.Parameter(torch.zeros(Ct)) if (affine and Ct) else None

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight[self.channel_of_feature]
        if self.bias is not None:
            Ct = self.bias.numel()
            y = torch.cat([y[..., :Ct] + self.bias, y[..., Ct:]], dim=-1)
        return y
