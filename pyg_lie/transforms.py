r"""PyG transforms for the group layers: :class:`LiftPositions` puts group elements on a graph.

The attention layers (:class:`~pyg_lie.nn.LieSelfAttention`,
:class:`~pyg_lie.nn.LieAlgebraAttention`) take the group element ``g_i`` of every node
beside ``x`` and ``edge_index``. :class:`LiftPositions` makes them from ``data.pos`` in a
dataset's ``transform`` (or ``pre_transform``), so a plain PyG pipeline (a
:class:`~torch_geometric.loader.DataLoader`, GraphGym, ``T.Compose``) carries ``data.g``
like any other node attribute:

    import torch_geometric.transforms as T
    from pyg_lie.transforms import LiftPositions

    transform = T.Compose([T.RadiusGraph(0.5), LiftPositions("SE2", lift_samples=4)])

``T.RadiusGraph`` needs pyg-lib's radius search; without pyg-lib call
:func:`pyg_lie.enable_pyg_radius` first (importing this module changes nothing in PyG).
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from ._checks import positive_int
from .groups import LieGroup, get_group

__all__ = ["LiftPositions"]


class LiftPositions(BaseTransform):
    r"""Lift ``data.pos`` to group elements ``data.g`` (``(N K, m, m)``) for the group layers.

    Every point ``x_i`` gets the ``K`` elements ``s(x_i) h_a`` of its orbit's lift, where ``s``
    is the group's section (``s(x) . o = x``) and ``h_a`` lie in the stabiliser of the
    origin (see :class:`~pyg_lie.nn.Lift`): with ``mode="haar"`` ``K`` random rotations
    (redrawn at every call unless ``seed`` is given), with ``mode="finite"`` the cyclic or
    polyhedral subgroup of order ``K``. For groups without a stabiliser (T(n), SO(2))
    ``K = 1`` and ``g = s(pos)`` exactly.

    With ``K = 1`` the graph is unchanged and only ``data.g`` is added. With ``K > 1``
    the graph becomes the lifted graph of the LieTransformer: lifted node ``i K + a`` is
    lift ``a`` of point ``i``, every node-level attribute (``x``, ``pos``, a node-level
    ``y``, ...) is repeated ``K`` times, an edge ``j -> i`` becomes the ``K^2`` edges
    ``j K + b -> i K + a`` (its ``edge_attr`` repeated), sorted by target then source, and
    ``data.lift_index`` holds the original point of each lifted node. Graph-level targets
    stay as they are; a mean over lifted nodes (``global_mean_pool``, or the GraphGym
    pooling ``"group_mean"``) is a mean over lifts. Build the edges between points first
    (``T.RadiusGraph`` before this transform), so that they are lifted with the nodes.

    Args:
        group: a :class:`~pyg_lie.groups.LieGroup` or its name (``"SE2"``); ``pos`` must
            have ``group.space_dim`` columns.
        lift_samples: ``K``, lifts per point (1 for T(n) and SO(2)).
        mode: ``"haar"`` or ``"finite"``.
        seed: ``None``: Haar samples from torch's global generator at every call (a random
            augmentation); an int: the same samples at every call for a graph of the same
            size (a fixed lift, as in evaluation).
    """

    def __init__(self, group: Union[str, LieGroup], lift_samples: int = 1, mode: str = "haar",
                 seed: Optional[int] = None) -> None:
        from .nn.lift import Lift

        self.group = get_group(group)
        self.lift_samples = positive_int("lift_samples", lift_samples)
        self.seed = None if seed is None else int(seed)
        self.lift = Lift(self.group, self.lift_samples, mode=mode, seed=0 if seed is None else self.seed)
        self.lift.train(seed is None)  # Lift draws from its seeded generator in evaluation mode
        self.mode = mode

    def forward(self, data: Data) -> Data:
        pos = getattr(data, "pos", None)
        if pos is None:
            raise ValueError("LiftPositions needs data.pos (the points to lift); "
                             "set it or put a transform that does before LiftPositions")
        n = pos.size(0) if isinstance(pos, torch.Tensor) else -1
        lifted = self.lift(None, pos)
        K = self.lift.num_samples
        if K == 1:
            data.g = lifted.g
            return data
        edge_index = getattr(data, "edge_index", None)
        num_edges = 0 if edge_index is None else edge_index.size(1)
        node_keys, edge_keys = [], []
        for key in list(data.keys()):  # classify before any size changes
            value = data[key]
            if key in ("edge_index", "batch", "ptr", "num_nodes") or not isinstance(value, torch.Tensor) \
                    or value.dim() == 0:
                continue
            if "edge" in key and value.size(0) == num_edges:
                edge_keys.append(key)
            elif "edge" not in key and value.size(0) == n and data.is_node_attr(key):
                node_keys.append(key)
        for key in node_keys:
            data[key] = data[key].repeat_interleave(K, dim=0)
        if getattr(data, "batch", None) is not None:
            data.batch = data.batch.repeat_interleave(K)
        if isinstance(getattr(data, "ptr", None), torch.Tensor):
            data.ptr = data.ptr * K
        if edge_index is not None:
            src, dst = edge_index
            a = torch.arange(K, device=src.device)
            # base edge e, target lift a, source lift b -> (src_e K + b, dst_e K + a), e-major
            s = (src.view(-1, 1, 1) * K + a.view(1, 1, K)).expand(-1, K, K).reshape(-1)
            t = (dst.view(-1, 1, 1) * K + a.view(1, K, 1)).expand(-1, K, K).reshape(-1)
            order = torch.argsort(t * (n * K) + s, stable=True)
            data.edge_index = torch.stack([s[order], t[order]])
            for key in edge_keys:
                data[key] = data[key].repeat_interleave(K * K, dim=0)[order]
        data.g = lifted.g
        data.lift_index = lifted.index
        data.num_nodes = n * K
        return data

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.group.name}, lift_samples={self.lift_samples}, "
                f"mode={self.mode!r}, seed={self.seed})")
