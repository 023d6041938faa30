"""Real principal matrix logarithm for small batched matrices, with a correct backward.

Method: inverse scaling and squaring (Higham, *Functions of Matrices*, SIAM 2008,
ch. 11; Kenney & Laub 1989):

1. take square roots ``X <- X^{1/2}`` (product-form Denman--Beavers iteration with
   determinantal scaling, Higham 2008, ch. 6) until ``||X - I||_F <= THETA``;
   the number ``s`` of square roots is chosen per batch element;
2. ``log(I + Z)`` with ``Z = X - I`` by the ``m = 8`` point Gauss--Legendre rule on
   ``log(I + Z) = int_0^1 Z (I + t Z)^{-1} dt``, which equals the ``[8/8]`` Pade
   approximant (Dieci, Morini & Papini 1996); for ``||Z|| <= 0.34`` its error is
   below double precision unit roundoff (Higham 2001; checked numerically: ~3e-16,
   i.e. rounding level, on the circle ``|z| = 0.34``);
3. ``log(A) = 2^s log(I + Z)``.

The iteration stops early, so differentiating through it gives wrong gradients.
:class:`_LogmFunction` therefore has its own backward, the adjoint of the Frechet
derivative: for upstream gradient ``G``,

    dL/dA = L_log(A^T, G) = top-right block of log([[A^T, G], [0, A^T]])

(Higham 2008, ch. 3: block-matrix formula for the Frechet derivative; Al-Mohy,
Higham & Relton 2013: for ``f`` with a real power series the adjoint of
``L_f(A, .)`` is ``L_f(A^T, .)``).
The backward calls the same function on the ``2n x 2n`` block matrix, so second
derivatives also work. All work happens in float64.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

THETA = 0.25  # ||X - I||_F at which the [8/8] Pade / Gauss-Legendre rule is used
MAX_SQRT = 64
MAX_DB = 60

_nodes, _weights = np.polynomial.legendre.leggauss(8)
GL_NODES = tuple(float(x) for x in (_nodes + 1.0) / 2.0)  # on [0, 1]
GL_WEIGHTS = tuple(float(w) for w in _weights / 2.0)


def _fro(X: Tensor) -> Tensor:
    return X.flatten(-2).norm(dim=-1)


def sqrtm_db(A: Tensor) -> Tensor:
    """Principal square root of ``A (B, n, n)`` (no eigenvalue on ``(-inf, 0]``).

    Product-form Denman--Beavers iteration with determinantal scaling:
    ``mu = |det M|^{-1/(2n)}``, ``Y <- mu Y (I + mu^-2 M^-1) / 2``,
    ``M <- (I + (mu^2 M + mu^-2 M^-1) / 2) / 2`` from ``M = Y = A``; ``Y -> A^{1/2}``,
    ``M -> I`` quadratically. Converged elements sit at the fixed point ``M = I``.
    """
    n = A.shape[-1]
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    M, Y = A, A
    tol = 1e-9 if A.dtype == torch.float64 else 1e-4
    extra = 2  # iterations after ||M - I|| <= tol (quadratic convergence)
    for _ in range(MAX_DB):
        Minv = torch.linalg.inv(M)
        mu = torch.linalg.det(M).abs().pow(-1.0 / (2 * n))[..., None, None]
        mu2 = mu * mu
        Y = 0.5 * mu * (Y @ (eye + Minv / mu2))
        M = 0.5 * (eye + 0.5 * (mu2 * M + Minv / mu2))
        if bool((_fro(M - eye) <= tol).all()):
            extra -= 1
            if extra == 0:
                break
    return Y


def log1p_pade(Z: Tensor) -> Tensor:
    """``log(I + Z)`` for ``||Z|| <= THETA`` by the 8-point Gauss--Legendre rule, ``(..., n, n)``."""
    n = Z.shape[-1]
    eye = torch.eye(n, dtype=Z.dtype, device=Z.device)
    x = torch.tensor(GL_NODES, dtype=Z.dtype, device=Z.device)[:, None, None]
    w = torch.tensor(GL_WEIGHTS, dtype=Z.dtype, device=Z.device)
    Zs = Z.unsqueeze(-3)  # (..., 1, n, n)
    terms = torch.linalg.solve(eye + x * Zs, Zs.expand(*Z.shape[:-2], len(GL_NODES), n, n))
    return torch.einsum("k,...kij->...ij", w, terms)


@torch.no_grad()
def logm_iss(A: Tensor) -> Tensor:
    """Principal logarithm of ``A (..., n, n)`` by inverse scaling and squaring (float64 inside).

    Elements with an eigenvalue on ``(-inf, 0]`` have no real principal logarithm;
    callers must exclude them (the result for them is meaningless).
    """
    shape = A.shape
    n = shape[-1]
    X = A.reshape(-1, n, n).to(torch.float64)
    eye = torch.eye(n, dtype=X.dtype, device=X.device)
    s = torch.zeros(X.shape[0], dtype=X.dtype, device=X.device)
    for _ in range(MAX_SQRT):
        need = _fro(X - eye) > THETA
        if not bool(need.any()):
            break
        X = X.clone()
        X[need] = sqrtm_db(X[need])
        s = s + need.to(X.dtype)
    L = log1p_pade(X - eye) * torch.exp2(s)[:, None, None]
    return L.reshape(shape).to(A.dtype)


class _LogmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(A)
        return logm_iss(A)

    @staticmethod
    def backward(ctx, G: Tensor) -> Tensor:  # type: ignore[override]
        (A,) = ctx.saved_tensors
        return logm_frechet_adjoint(A, G)


def logm_frechet_adjoint(A: Tensor, G: Tensor) -> Tensor:
    """Adjoint Frechet derivative ``L_log(A^T, G)``, shapes ``(..., n, n)``.

    Uses ``log([[A^T, c G], [0, A^T]])`` top-right block divided by ``c``; the
    constant ``c = ||A|| / ||G||`` keeps the block matrix balanced (the result is
    linear in ``G``, so ``c`` does not change it).
    """
    n = A.shape[-1]
    At = A.transpose(-1, -2)
    G = G.expand_as(At)
    nA, nG = _fro(At).detach(), _fro(G).detach()
    c = torch.where(nG > 0, nA / torch.where(nG > 0, nG, torch.ones_like(nG)), torch.ones_like(nG))
    c = c[..., None, None]
    zero = torch.zeros_like(At)
    big = torch.cat([torch.cat([At, c * G], -1), torch.cat([zero, At], -1)], -2)
    return logm(big)[..., :n, n:] / c


@torch.compiler.disable
def logm(A: Tensor) -> Tensor:
    """Differentiable real principal logarithm of ``A (..., n, n)`` (no eigenvalue on ``(-inf, 0]``)."""
    return _LogmFunction.apply(A)


def phi(X: Tensor) -> Tensor:
    """``phi(X) = sum_k X^k / (k+1)! = int_0^1 exp(sX) ds`` for ``X (..., n, n)``.

    Top-right block of ``expm([[X, I], [0, 0]])`` (Van Loan 1978), differentiable.
    """
    n = X.shape[-1]
    eye = torch.eye(n, dtype=X.dtype, device=X.device).expand_as(X)
    zero = torch.zeros_like(X)
    big = torch.cat([torch.cat([X, eye], -1), torch.cat([zero, zero], -1)], -2)
    return torch.linalg.matrix_exp(big)[..., :n, n:]
