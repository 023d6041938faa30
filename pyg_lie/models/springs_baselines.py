r"""The non-invariant potentials the LieTransformer paper compares against on spring dynamics.

Both plug into :class:`~pyg_lie.models.HamiltonianNODE` as ``V_theta(q; m, k)`` with the
PyG point-cloud signature ``potential(x, pos, batch) -> (num_graphs, 1)``, so they are
trained and evaluated in exactly the harness of the Hamiltonian LieTransformer (known
kinetic energy, learned potential, RK4):

* :class:`FCPotential` -- the paper's "FC": an MLP on the flattened state of the whole
  system, ``V = MLP([q_1 - \bar q, m_1, k_1, ..., q_n - \bar q, m_n, k_n])``;
* :class:`GraphNetworkPotential` -- the paper's "GN": a graph network (edge, node and
  global updates, Battaglia et al. 2018) over the fully connected particle graph, whose
  node inputs are ``[q_i - \bar q, m_i, k_i]`` and whose global output is ``V``.

Positions enter relative to the system's centroid ``\bar q`` (as in the reference
implementation of these baselines), so both are translation invariant; neither is
rotation invariant, and the FC network is not even permutation invariant.  Activations are
SiLU (swish): the training loss differentiates ``grad_q V`` again, so the network must be
smooth.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from .._batch import num_graphs

__all__ = ["FCPotential", "GraphNetworkPotential"]


def _mlp(sizes, final_act: bool = True) -> nn.Sequential:
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if final_act or i < len(sizes) - 2:
            layers.append(nn.SiLU())
    return nn.Sequential(*layers)


def _check_inputs(x: Tensor, pos: Tensor, batch: Optional[Tensor], in_channels: int) -> Tensor:
    for name, t in (("x", x), ("pos", pos)):
        if not isinstance(t, Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor (num_nodes, channels), got "
                             f"{tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__}")
    if x.shape[0] != pos.shape[0]:
        raise ValueError(f"x and pos must have one row per particle, got {x.shape[0]} and {pos.shape[0]} rows")
    if x.shape[1] != in_channels:
        raise ValueError(f"x must have in_channels = {in_channels} columns (e.g. [m_i, k_i]), got {x.shape[1]}")
    if batch is None:
        return torch.zeros(pos.shape[0], dtype=torch.long, device=pos.device)
    if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.shape[0] != pos.shape[0] or batch.is_floating_point():
        raise ValueError(f"batch must be an integer vector with one graph id per particle ({pos.shape[0]})")
    return batch.long()


def _centred(pos: Tensor, batch: Tensor, B: int) -> Tensor:
    """``q_i - mean_{j in graph(i)} q_j``."""
    count = torch.zeros(B, dtype=pos.dtype, device=pos.device).index_add_(0, batch, torch.ones_like(pos[:, 0]))
    total = torch.zeros(B, pos.shape[1], dtype=pos.dtype, device=pos.device).index_add_(0, batch, pos)
    return pos - (total / count.clamp_min(1).unsqueeze(-1))[batch]


class FCPotential(nn.Module):
    r"""Fully connected potential ``V(q; m, k) = MLP(flattened [q_i - \bar q, m_i, k_i])``.

    The paper's "FC" baseline: every system must have exactly ``num_particles`` particles,
    listed graph by graph (``batch`` sorted), since the network sees them as one vector in a
    fixed order.

    Args:
        num_particles: particles per system (6 for the spring task).
        space_dim: ``d``.
        in_channels: per-particle features (2 for ``(m, k)``).
        hidden_channels: width of the hidden layers (the reference code: 150).
        num_layers: hidden layers (the reference code: 4).
    """

    def __init__(self, num_particles: int = 6, space_dim: int = 2, in_channels: int = 2,
                 hidden_channels: int = 150, num_layers: int = 4) -> None:
        super().__init__()
        for name, v, low in (("num_particles", num_particles, 1), ("space_dim", space_dim, 1),
                             ("in_channels", in_channels, 0), ("hidden_channels", hidden_channels, 1),
                             ("num_layers", num_layers, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        self.num_particles, self.space_dim, self.in_channels = num_particles, space_dim, in_channels
        width = num_particles * (space_dim + in_channels)
        self.mlp = _mlp([width] + [hidden_channels] * num_layers + [1], final_act=False)

    def forward(self, x: Tensor, pos: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        """``x: (N, C)``, ``pos: (N, d)``, ``batch: (N,)`` sorted, ``num_particles`` per graph -> ``(B, 1)``."""
        batch = _check_inputs(x, pos, batch, self.in_channels)
        if pos.shape[1] != self.space_dim:
            raise ValueError(f"pos must have space_dim = {self.space_dim} columns, got {pos.shape[1]}")
        n = self.num_particles
        B = pos.shape[0] // n
        expected = torch.arange(B, device=batch.device).repeat_interleave(n)
        if pos.shape[0] != B * n or not torch.equal(batch, expected):
            raise ValueError(f"FCPotential needs exactly num_particles = {n} particles per system, listed system "
                             f"by system (batch sorted); build one model per system size")
        feats = torch.cat([_centred(pos, batch, B), x], dim=-1)  # (N, d + C)
        return self.mlp(feats.reshape(B, -1))


class _EdgeUpdate(nn.Module):
    def __init__(self, node: int, edge: int, hidden: int) -> None:
        super().__init__()
        self.mlp = _mlp([2 * node + edge, hidden, hidden])

    def forward(self, src: Tensor, dst: Tensor, edge_attr: Optional[Tensor], u, batch) -> Tensor:
        parts = [src, dst] + ([edge_attr] if edge_attr is not None else [])
        return self.mlp(torch.cat(parts, dim=-1))


class _NodeUpdate(nn.Module):
    def __init__(self, node: int, hidden: int) -> None:
        super().__init__()
        self.mlp = _mlp([node + hidden, hidden, hidden])

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u, batch) -> Tensor:
        from torch_geometric.utils import scatter
        incoming = scatter(edge_attr, edge_index[1], dim=0, dim_size=x.shape[0], reduce="sum")
        return self.mlp(torch.cat([x, incoming], dim=-1))


class _GlobalUpdate(nn.Module):
    def __init__(self, glob: int, hidden: int) -> None:
        super().__init__()
        self.mlp = _mlp([glob + 2 * hidden, hidden, hidden])

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Optional[Tensor], batch: Tensor) -> Tensor:
        from torch_geometric.utils import scatter
        B = u.shape[0]
        edges = scatter(edge_attr, batch[edge_index[1]], dim=0, dim_size=B, reduce="sum")
        nodes = scatter(x, batch, dim=0, dim_size=B, reduce="sum")
        return self.mlp(torch.cat([u, edges, nodes], dim=-1))


class GraphNetworkPotential(nn.Module):
    r"""Graph-network potential on the fully connected particle graph (the paper's "GN").

    Each of ``num_layers`` blocks is a :class:`torch_geometric.nn.MetaLayer` with sum
    aggregation: edges ``e'_{ij} = phi_e([h_i, h_j, e_{ij}])``, nodes
    ``h'_i = phi_v([h_i, sum_{j} e'_{ji}])``, global ``u' = phi_u([u, sum e', sum h'])``
    (two-layer SiLU MLPs of width ``hidden_channels``); the first block starts from node
    features ``[q_i - \bar q, m_i, k_i]``, no edge features and a zero global, and
    ``V = Linear(u)`` after the last block.  Edges join every ordered pair of distinct
    particles of a system, so any number of particles per system works.

    Args:
        in_channels: per-particle features (2 for ``(m, k)``).
        space_dim: ``d``.
        hidden_channels: MLP width (the reference code: 64).
        num_layers: graph-network blocks (the reference code: 1).
    """

    def __init__(self, in_channels: int = 2, space_dim: int = 2, hidden_channels: int = 64,
                 num_layers: int = 1) -> None:
        super().__init__()
        from torch_geometric.nn import MetaLayer
        for name, v, low in (("in_channels", in_channels, 0), ("space_dim", space_dim, 1),
                             ("hidden_channels", hidden_channels, 1), ("num_layers", num_layers, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        self.in_channels, self.space_dim, self.hidden_channels = in_channels, space_dim, hidden_channels
        blocks = []
        node, edge, glob = space_dim + in_channels, 0, 1
        for _ in range(num_layers):
            blocks.append(MetaLayer(_EdgeUpdate(node, edge, hidden_channels), _NodeUpdate(node, hidden_channels),
                                    _GlobalUpdate(glob, hidden_channels)))
            node = edge = glob = hidden_channels
        self.blocks = nn.ModuleList(blocks)
        self.out = nn.Linear(hidden_channels, 1)

    @staticmethod
    def complete_graph(batch: Tensor) -> Tensor:
        """``edge_index`` joining every ordered pair of distinct nodes with the same graph id."""
        same = batch.unsqueeze(0) == batch.unsqueeze(1)
        same.fill_diagonal_(False)
        src, dst = same.nonzero(as_tuple=True)
        return torch.stack([src, dst])

    def forward(self, x: Tensor, pos: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        """``x: (N, C)``, ``pos: (N, d)``, ``batch: (N,)`` -> ``(num_graphs, 1)``."""
        batch = _check_inputs(x, pos, batch, self.in_channels)
        if pos.shape[1] != self.space_dim:
            raise ValueError(f"pos must have space_dim = {self.space_dim} columns, got {pos.shape[1]}")
        B = num_graphs(batch)
        edge_index = self.complete_graph(batch)
        h = torch.cat([_centred(pos, batch, B), x], dim=-1)
        e: Optional[Tensor] = None
        u = h.new_zeros(B, 1)
        for block in self.blocks:
            h, e, u = block(h, edge_index, e, u, batch)
        return self.out(u)
