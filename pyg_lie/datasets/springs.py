r"""Spring dynamics: the Hamiltonian benchmark of LieConv / LieTransformer.

The system (Finzi et al. 2020, Appendix C.4; Hutchinson et al. 2021, Sec. 5.3
and Appendix I.3): ``n = 6`` particles in ``R^2`` with masses ``m_i`` and
spring coefficients ``k_i``; every pair is joined by a spring of stiffness
coefficient ``k_i k_j`` and rest length 0:

.. math::

    H(q, p) = \sum_i \frac{\|p_i\|^2}{2 m_i}
            + \frac12 \sum_{i, j} k_i k_j \|q_i - q_j\|^2
            = \sum_i \frac{\|p_i\|^2}{2 m_i} + \sum_{i < j} k_i k_j \|q_i - q_j\|^2 .

Convention note: the field notes write ``1/2 sum k_i k_j |q_i - q_j|^2``; the
LieConv code (``SpringV``) evaluates that ``1/2 sum`` over *ordered* pairs
``(i, j)``, i.e. a pair energy ``k_i k_j r^2`` (not ``1/2 k_i k_j r^2``).  We
follow the code, on whose data the paper's numbers were measured.

Sampling: ``m ~ U(0.1, 3.1)``, ``k ~ U(0, 5)``, ``q_0 = 0.4 N(0, I)``,
``p_0 = 0.6 N(0, I)`` with the momentum centred **per system**
(``sum_i p_i = 0``; the original code subtracted the mean over the batch of
systems instead).  Trajectories are integrated with classical RK4 in float64,
``num_steps = 500`` steps of ``dt = 0.01`` on ``[0, 5]``.

Items: in ``mode="chunks"`` (training) a random window of ``chunk_len + 1``
consecutive states per system (start drawn once from the seed), in
``mode="trajectories"`` (testing) the full trajectory.  Both return a dict of
tensors (see :meth:`SpringDynamics.__getitem__`) that the default
``torch.utils.data.DataLoader`` collate stacks into a batch.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.data import Dataset

from .._checks import positive_int

__all__ = ["SpringDynamics", "spring_potential", "spring_hamiltonian", "rk4_step", "sample_systems"]


def spring_potential(q: Tensor, k: Tensor) -> Tensor:
    r"""``V(q) = 1/2 sum_{i,j} k_i k_j |q_i - q_j|^2`` (ordered pairs, LieConv convention).

    Args:
        q: positions ``(..., n, d)``.
        k: spring coefficients ``(..., n)``.

    Returns:
        ``(...,)`` potential energy.
    """
    K = k.unsqueeze(-1) * k.unsqueeze(-2)  # (..., n, n)
    r2 = (q.unsqueeze(-2) - q.unsqueeze(-3)).pow(2).sum(-1)  # (..., n, n)
    return 0.5 * (K * r2).sum((-1, -2))


def spring_hamiltonian(q: Tensor, p: Tensor, m: Tensor, k: Tensor) -> Tensor:
    r"""``H = sum_i |p_i|^2 / (2 m_i) + V(q)``; ``q, p: (..., n, d)``, ``m, k: (..., n)`` -> ``(...,)``."""
    return (p.pow(2).sum(-1) / (2 * m)).sum(-1) + spring_potential(q, k)


def _spring_vector_field(q: Tensor, p: Tensor, m: Tensor, k: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Exact Hamiltonian vector field ``(dq/dt, dp/dt) = (p/m, -dV/dq)``.

    ``dV/dq_i = 2 k_i sum_j k_j (q_i - q_j)`` for the ordered-pair potential.
    """
    dq = p / m.unsqueeze(-1)
    ksum = k.sum(-1, keepdim=True)  # (..., 1)
    kq = (k.unsqueeze(-1) * q).sum(-2, keepdim=True)  # (..., 1, d)
    grad_v = 2 * k.unsqueeze(-1) * (ksum.unsqueeze(-1) * q - kq)
    return dq, -grad_v


def rk4_step(f: Callable[[Tensor, Tensor], Tuple[Tensor, Tensor]], q: Tensor, p: Tensor,
             dt: float) -> Tuple[Tensor, Tensor]:
    r"""One classical Runge-Kutta (RK4) step for ``(q, p)' = f(q, p)``.

    ``z_{n+1} = z_n + dt/6 (k_1 + 2 k_2 + 2 k_3 + k_4)`` with the usual stages.
    Shapes are whatever ``f`` accepts; ``f`` returns ``(dq, dp)`` of the same shapes.
    """
    a1, b1 = f(q, p)
    a2, b2 = f(q + 0.5 * dt * a1, p + 0.5 * dt * b1)
    a3, b3 = f(q + 0.5 * dt * a2, p + 0.5 * dt * b2)
    a4, b4 = f(q + dt * a3, p + dt * b3)
    return (q + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4),
            p + dt / 6 * (b1 + 2 * b2 + 2 * b3 + b4))


def sample_systems(num_systems: int, num_particles: int = 6, space_dim: int = 2,
                   generator: Optional[torch.Generator] = None) -> Dict[str, Tensor]:
    r"""Draw initial conditions and parameters (float64).

    Returns a dict with ``q0, p0: (S, n, d)`` and ``m, k: (S, n)``; ``p0`` has
    zero total momentum per system.
    """
    S, n, d = num_systems, num_particles, space_dim
    f64 = torch.float64
    m = 3 * torch.rand(S, n, generator=generator, dtype=f64) + 0.1
    k = 5 * torch.rand(S, n, generator=generator, dtype=f64)
    q0 = 0.4 * torch.randn(S, n, d, generator=generator, dtype=f64)
    p0 = 0.6 * torch.randn(S, n, d, generator=generator, dtype=f64)
    p0 = p0 - p0.mean(dim=1, keepdim=True)  # per system (the original used dim=0)
    return {"q0": q0, "p0": p0, "m": m, "k": k}


def integrate(q0: Tensor, p0: Tensor, m: Tensor, k: Tensor, num_steps: int, dt: float,
              substeps: int = 1) -> Tuple[Tensor, Tensor]:
    r"""RK4 trajectories of the true system.

    Args:
        q0, p0: ``(S, n, d)``; m, k: ``(S, n)``.
        num_steps: number of output steps (the trajectory has ``num_steps + 1`` states).
        dt: output step.
        substeps: RK4 steps of size ``dt / substeps`` per output step (1 = the paper).

    Returns:
        ``q, p`` of shape ``(S, num_steps + 1, n, d)``.
    """
    f = lambda a, b: _spring_vector_field(a, b, m, k)  # noqa: E731
    qs, ps = [q0], [p0]
    q, p = q0, p0
    h = dt / substeps
    for _ in range(num_steps):
        for _ in range(substeps):
            q, p = rk4_step(f, q, p, h)
        qs.append(q)
        ps.append(p)
    return torch.stack(qs, 1), torch.stack(ps, 1)


class SpringDynamics(Dataset):
    r"""Trajectories of 6 spring-coupled particles in 2-D (deterministic from ``seed``).

    Args:
        num_systems: number of independent systems (= examples).
        mode: ``"chunks"`` (one random window of ``chunk_len`` steps per system,
            for training) or ``"trajectories"`` (full trajectories, for testing).
        chunk_len: steps per window (the window holds ``chunk_len + 1`` states; the
            first is the initial condition, the model predicts the other ``chunk_len``).
        seed: seed of the generator; different splits must use different seeds.
        num_particles, space_dim: system size (6 and 2 in the paper).
        t_end, num_steps: time horizon and number of RK4 steps (``dt = t_end / num_steps``).
        substeps: RK4 sub-steps per stored step (1 reproduces the paper's data).
        dtype: dtype of the returned tensors (the simulation is always float64).

    Attributes:
        q, p: ``(S, T + 1, n, d)`` float64 trajectories; ``m, k``: ``(S, n)``;
        ``ts``: ``(T + 1,)`` times; ``starts``: ``(S,)`` chunk start indices.

    Items (dict):
        ``z``: ``(L, n, 2 d)`` states ``[q, p]`` per particle (``L = chunk_len + 1``
        or ``T + 1``); ``m``, ``k``: ``(n,)``; ``ts``: ``(L,)``.
    """

    def __init__(self, num_systems: int, mode: str = "chunks", chunk_len: int = 5, seed: int = 0,
                 num_particles: int = 6, space_dim: int = 2, t_end: float = 5.0,
                 num_steps: int = 500, substeps: int = 1,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        num_systems = positive_int("num_systems", num_systems)
        if mode not in ("chunks", "trajectories"):
            raise ValueError(f"mode must be 'chunks' or 'trajectories', got {mode!r}")
        if num_steps < 1 or not t_end > 0 or t_end == float("inf"):
            raise ValueError(f"need num_steps >= 1 and a finite t_end > 0, got num_steps={num_steps}, t_end={t_end}")
        if positive_int("num_particles", num_particles) < 2:
            raise ValueError(f"num_particles must be >= 2 (springs join pairs), got {num_particles}")
        positive_int("space_dim", space_dim)
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
        if not 1 <= chunk_len <= num_steps:
            raise ValueError(f"chunk_len must be in [1, num_steps={num_steps}], got {chunk_len}")
        if substeps < 1:
            raise ValueError(f"substeps must be >= 1, got {substeps}")
        self.mode, self.chunk_len, self.seed, self.dtype = mode, chunk_len, seed, dtype
        self.dt = t_end / num_steps
        gen = torch.Generator().manual_seed(seed)
        sysp = sample_systems(num_systems, num_particles, space_dim, generator=gen)
        self.m, self.k = sysp["m"], sysp["k"]
        self.q, self.p = integrate(sysp["q0"], sysp["p0"], self.m, self.k, num_steps, self.dt, substeps)
        self.ts = torch.arange(num_steps + 1, dtype=torch.float64) * self.dt
        self.starts = torch.randint(0, num_steps - chunk_len + 1, (num_systems,), generator=gen)

    def __len__(self) -> int:
        return self.m.shape[0]

    def energy(self) -> Tensor:
        """True energy along every stored trajectory, ``(S, T + 1)`` float64."""
        return spring_hamiltonian(self.q, self.p, self.m.unsqueeze(1), self.k.unsqueeze(1))

    def __getitem__(self, i: int) -> Dict[str, Tensor]:
        if self.mode == "chunks":
            s = int(self.starts[i])
            sl = slice(s, s + self.chunk_len + 1)
        else:
            sl = slice(None)
        z = torch.cat([self.q[i, sl], self.p[i, sl]], dim=-1)
        return {"z": z.to(self.dtype), "m": self.m[i].to(self.dtype), "k": self.k[i].to(self.dtype),
                "ts": (self.ts[sl] - self.ts[sl][0]).to(self.dtype)}

    def __repr__(self) -> str:
        return (f"SpringDynamics({len(self)}, mode={self.mode!r}, chunk_len={self.chunk_len}, "
                f"dt={self.dt:g}, seed={self.seed})")
