r"""Hamiltonian neural ODE with a learned potential (Hutchinson et al. 2021, Sec. 5.3).

The Hamiltonian of a system of ``n`` particles in ``R^d`` is split into a known
kinetic term and a learned potential (following Finzi et al. 2020):

.. math::

    H_\theta(q, p) = \sum_i \frac{\|p_i\|^2}{2 m_i} + V_\theta(q; m, k),
    \qquad \dot q = \partial H / \partial p = p / m,
    \qquad \dot p = -\partial H / \partial q = -\nabla_q V_\theta .

``V_theta`` is any ``nn.Module`` with the PyG point-cloud signature
``potential(x, pos, batch) -> (num_graphs, 1)`` where ``x = [m_i, k_i]`` are the
per-particle features (``f_i = (m_i, k_i)`` in the paper), ``pos = q_i`` and
``batch`` assigns particles to systems -- e.g. a
:class:`pyg_lie.models.LieTransformer` (T(2), or SE(2) with the finite ``C_2``
lift, constant attention normalisation), or :class:`PairwiseMLPPotential`.

If ``V_theta`` is invariant under a group ``G`` acting on ``q`` (and on ``p`` by
the linear part), ``H_theta`` is invariant and the flow is ``G``-equivariant;
by Noether's theorem the corresponding momenta are conserved.

The flow is integrated with classical RK4 at a fixed step; training
back-propagates through ``grad_q V`` (``create_graph=True``), i.e. a double
backward through the potential network.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from .. import _checks as checks
from .._batch import num_graphs

__all__ = ["HamiltonianNODE", "PairwiseMLPPotential", "rollout_mse"]


class PairwiseMLPPotential(nn.Module):
    r"""A simple E(d)-invariant potential: ``V = sum_{i != j in same graph} phi(|q_i - q_j|^2, x_i, x_j)``.

    Used as a fast stand-in in tests and as a baseline.  ``phi`` is an MLP with
    ``tanh`` activations (smooth, so the double backward is well defined).

    Args:
        in_channels: per-particle feature size (2 for ``(m, k)``).
        hidden_channels: MLP width.
        num_layers: number of hidden layers of the MLP.
    """

    def __init__(self, in_channels: int = 2, hidden_channels: int = 32, num_layers: int = 2) -> None:
        super().__init__()
        in_channels = checks.nonnegative_int("in_channels", in_channels)
        hidden_channels = checks.positive_int("hidden_channels", hidden_channels)
        num_layers = checks.positive_int("num_layers", num_layers)
        layers, c = [], 1 + 2 * in_channels
        for _ in range(num_layers):
            layers += [nn.Linear(c, hidden_channels), nn.Tanh()]
            c = hidden_channels
        layers.append(nn.Linear(c, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x: Tensor, pos: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        """``x: (N, C)``, ``pos: (N, d)``, ``batch: (N,)`` -> ``(num_graphs, 1)``."""
        if batch is None:
            batch = torch.zeros(pos.shape[0], dtype=torch.long, device=pos.device)
        same = batch.unsqueeze(0) == batch.unsqueeze(1)
        same.fill_diagonal_(False)
        dst, src = same.nonzero(as_tuple=True)
        r2 = (pos[dst] - pos[src]).pow(2).sum(-1, keepdim=True)
        e = self.mlp(torch.cat([r2, x[dst], x[src]], dim=-1))  # (E, 1)
        out = torch.zeros(num_graphs(batch), 1, dtype=e.dtype, device=e.device)
        return out.index_add_(0, batch[dst], e)


class HamiltonianNODE(nn.Module):
    r"""Hamiltonian neural ODE ``H = sum p^2 / 2m + V_theta(q)`` integrated with RK4.

    Args:
        potential: module ``(x, pos, batch) -> (num_graphs, 1)`` giving ``V_theta``.
        space_dim: ``d`` (2 for the spring task).

    State layout: ``z`` of shape ``(B, n, 2 d)`` holds ``[q_i, p_i]`` per particle
    (the layout of :class:`pyg_lie.datasets.SpringDynamics`).
    """

    def __init__(self, potential: nn.Module, space_dim: int = 2) -> None:
        super().__init__()
        if not isinstance(potential, nn.Module):
            raise ValueError(f"potential must be an nn.Module mapping (x, pos, batch) -> (num_graphs, 1), "
                             f"got {type(potential).__name__}")
        space_dim = checks.positive_int("space_dim", space_dim)
        self.potential = potential
        self.space_dim = space_dim

    # ----------------------------------------------------------- energies
    @staticmethod
    def kinetic(p: Tensor, m: Tensor) -> Tensor:
        """``sum_i |p_i|^2 / (2 m_i)``; ``p: (B, n, d)``, ``m: (B, n)`` -> ``(B,)``."""
        return (p.pow(2).sum(-1) / (2 * m)).sum(-1)

    def potential_energy(self, q: Tensor, m: Tensor, k: Tensor) -> Tensor:
        """``V_theta(q; m, k)``: ``q: (B, n, d)``, ``m, k: (B, n)`` -> ``(B,)``."""
        B, n, d = q.shape
        x = torch.stack([m, k], dim=-1).reshape(B * n, 2)
        batch = torch.arange(B, device=q.device).repeat_interleave(n)
        V = self.potential(x, q.reshape(B * n, d), batch)
        if V.shape != (B, 1):
            raise ValueError(f"potential must return (num_graphs, 1) = ({B}, 1), got {tuple(V.shape)}")
        return V.squeeze(-1)

    def hamiltonian(self, q: Tensor, p: Tensor, m: Tensor, k: Tensor) -> Tensor:
        """``H_theta(q, p) = K(p) + V_theta(q)`` of shape ``(B,)``."""
        return self.kinetic(p, m) + self.potential_energy(q, m, k)

    # ----------------------------------------------------------- dynamics
    def vector_field(self, q: Tensor, p: Tensor, m: Tensor, k: Tensor,
                     create_graph: bool) -> Tuple[Tensor, Tensor]:
        r"""Hamilton's equations ``(dq/dt, dp/dt) = (p / m, -grad_q V)``, each ``(B, n, d)``.

        ``create_graph=True`` keeps the graph of ``grad_q V`` so that a loss on
        the trajectory can be differentiated w.r.t. the parameters (double backward).
        """
        with torch.enable_grad():
            if not (create_graph and q.requires_grad):
                q = q.detach().requires_grad_(True)
            V = self.potential_energy(q, m, k).sum()  # systems are independent
            (grad_q,) = torch.autograd.grad(V, q, create_graph=create_graph)
        if not create_graph:
            grad_q = grad_q.detach()
        return p / m.unsqueeze(-1), -grad_q

    def forward(self, z0: Tensor, m: Tensor, k: Tensor, num_steps: int, dt: float) -> Tensor:
        r"""Roll out ``num_steps`` RK4 steps of size ``dt`` from ``z0``.

        Args:
            z0: ``(B, n, 2 d)`` initial states ``[q, p]``.
            m, k: ``(B, n)`` masses and spring coefficients (features of ``V``).
            num_steps: number of steps ``T``.
            dt: step size.

        Returns:
            ``(B, T + 1, n, 2 d)`` trajectory including ``z0``.  Differentiable
            w.r.t. the parameters when grad mode is enabled.
        """
        d = self.space_dim
        if z0.dim() != 3 or z0.shape[-1] != 2 * d:
            raise ValueError(f"z0 must have shape (B, n, {2 * d}), got {tuple(z0.shape)}")
        if m.shape != z0.shape[:2] or k.shape != z0.shape[:2]:
            raise ValueError(f"m and k must have shape {tuple(z0.shape[:2])}, got {tuple(m.shape)}, {tuple(k.shape)}")
        num_steps = checks.nonnegative_int("num_steps", num_steps)
        checks.finite_float("dt", dt, " (negative: integrate backwards)")
        like = next(self.parameters(), None)
        for name, t in (("z0", z0), ("m", m), ("k", k)):
            checks.floating(name, t, like=like)
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} contains non-finite entries (NaN or inf)")
        if not bool((m > 0).all()):
            raise ValueError("m holds masses, which must be positive (p / m is the velocity)")
        create_graph = torch.is_grad_enabled()
        q, p = z0[..., :d], z0[..., d:]

        def f(a: Tensor, b: Tensor) -> Tuple[Tensor, Tensor]:
            return self.vector_field(a, b, m, k, create_graph)

        out = [z0]
        for _ in range(num_steps):
            a1, b1 = f(q, p)
            a2, b2 = f(q + 0.5 * dt * a1, p + 0.5 * dt * b1)
            a3, b3 = f(q + 0.5 * dt * a2, p + 0.5 * dt * b2)
            a4, b4 = f(q + dt * a3, p + dt * b3)
            q = q + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
            p = p + dt / 6 * (b1 + 2 * b2 + 2 * b3 + b4)
            out.append(torch.cat([q, p], dim=-1))
        return torch.stack(out, dim=1)


def rollout_mse(pred: Tensor, target: Tensor) -> Tensor:
    r"""Per-step MSE ``(T,)`` between ``(B, T + 1, n, 2d)`` rollouts, skipping the initial state.

    The training loss is its arithmetic mean; the paper's test metric for long
    rollouts is the geometric mean ``exp(mean_t log mse_t)``.
    """
    if pred.shape != target.shape:
        raise ValueError(f"pred and target must have the same shape, got {tuple(pred.shape)} and {tuple(target.shape)}")
    return (pred[:, 1:] - target[:, 1:]).pow(2).mean(dim=(0, 2, 3))
