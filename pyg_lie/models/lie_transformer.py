r"""The LieTransformer model (Hutchinson et al., 2021, Fig. 1) on PyG batches.

``Lift -> Linear -> L x LieTransformerBlock -> LayerNorm -> GroupPool -> MLP``:

* the cloud ``(x, pos, batch)`` is lifted to ``N K`` group elements
  (:class:`~pyg_lie.nn.Lift`, Haar samples or a finite subgroup);
* lifted edges come from a radius graph on the *base* positions (complete
  graph per cloud with ``radius=None``), expanded to all lift pairs
  (:mod:`pyg_lie.nn.lifted_edges`), optionally subsampled / thresholded;
* every block is equivariant for the left action on lifted nodes, the mean
  pooling is invariant, so the output is invariant: exactly for T(n), SO(2),
  and for ``lift="finite"`` under the translations x| the finite subgroup; in
  expectation over the lift for Haar lifts.

Output: one vector ``(B, out_channels)`` per graph.

e3nn irreps (``irreps_in`` / ``irreps_out``, groups SO3 and SE3): the point features
are seen in each lift's frame (:class:`~pyg_lie.interop.e3nn.IrrepsLift`,
``x_k = D(R_k)^{-1} x_i``), the head runs on every lifted node and its outputs are
rotated back and averaged (:class:`~pyg_lie.interop.e3nn.IrrepsPool`,
``mean_k D(R_k) y_k``), so the output is an ``irreps_out`` tensor that rotates with
the input, with the same exactness as the invariant model.
"""
from __future__ import annotations

from typing import Dict, Optional, Union

import torch
from torch import Tensor
from torch.nn import LayerNorm, Linear, Module, ModuleList, Sequential, SiLU
from torch_geometric.utils import scatter

from .. import _checks as checks
from .._batch import num_graphs as count_graphs
from .._checks import nonnegative_int, optional_length, positive_int
from ..groups import LieGroup, get_group
from ..nn.group_pool import GroupPool
from ..nn.lie_transformer_block import LieTransformerBlock
from ..nn.lift import Lift, LiftedPoints
from ..ops import CSRStructure
from ..nn.lifted_edges import check_distance_weights, lifted_edges

__all__ = ["LieTransformer"]


def _base_edges(base: Tensor, lifted: Tensor, index: Tensor, num_points: int) -> Tensor:
    """The position in ``base (2, E)`` of the base edge of every lifted edge ``(2, E_l)``
    (``index``: the point of every lifted node), by a sorted key lookup."""
    base = checks.index_tensor("edge_index", base, num_points, "point")
    n = max(num_points, 1)
    key, order = torch.sort(base[1] * n + base[0])
    if key.numel() > 1 and bool((key[1:] == key[:-1]).any()):
        raise ValueError("edge_index holds an edge twice; edge_attr needs one row per distinct edge "
                         "(remove duplicates, e.g. with torch_geometric.utils.coalesce)")
    want = index[lifted[1]] * n + index[lifted[0]]
    return order[torch.searchsorted(key, want)]


def _orbit_dim(group: LieGroup) -> int:
    inv = group.orbit_invariants(group.origin(dtype=torch.float64).unsqueeze(0))
    return 0 if inv is None else int(inv.shape[-1])


def _irreps_channels(irreps, channels: Optional[int], side: str) -> int:
    """The channel count of ``irreps``; a given ``{side}_channels`` must agree with it."""
    if irreps.dim == 0:
        raise ValueError(f"irreps_{side} must have dimension >= 1, got '{irreps}'")
    if channels is not None and channels != irreps.dim:
        raise ValueError(f"{side}_channels ({channels!r}) must equal the dimension of irreps_{side} "
                         f"'{irreps}' ({irreps.dim}); omit {side}_channels")
    return irreps.dim


class LieTransformer(Module):
    r"""Group-invariant (or, with ``irreps_out``, e3nn-equivariant) LieTransformer.

    Args:
        group: Lie group or its name (``"T2"``, ``"SE2"``, ``"SO2"``, ``"T3"``,
            ``"SO3"``, ``"SE3"``).
        in_channels: point feature size (may be omitted with ``irreps_in``).
        hidden_channels: feature size ``d_v`` of the lifted nodes (required).
        out_channels: size of the invariant output per graph (may be omitted with
            ``irreps_out``).
        num_layers: number of :class:`~pyg_lie.nn.LieTransformerBlock`.
        heads: attention heads.
        lift_samples: ``K``, lifts per point (1 for T(n) and SO(2)).
        radius: base neighbourhood radius; ``None`` = all pairs of each cloud.
        lift: ``"haar"`` (random stabiliser samples), ``"finite"``
            (``C_K`` / a finite rotation group: exact discrete invariance; for SE3
            ``lift_samples`` 12, 24, 60 give the tetrahedral, octahedral and
            icosahedral groups) or ``"grid"`` (that finite group turned by a random
            stabiliser element per point: equally spaced angles for SE2; see
            :class:`~pyg_lie.nn.Lift`).
        subgroup: with ``lift="finite"``, an explicit finite subgroup of the
            stabiliser instead of the one ``lift_samples`` names: a
            :class:`~pyg_lie.groups.finite.FiniteGroup` (``Octahedral()``,
            ``Icosahedral()`` for SE3, ``Cn(k)`` for SE2 and SO3) or its elements;
            ``lift_samples`` is then its order.
        irreps_in: e3nn ``Irreps`` (or string) of the point features ``x`` in the
            global frame, for SO3 and SE3; ``in_channels`` then defaults to its
            dimension (and must equal it if given).
        irreps_out: e3nn ``Irreps`` of the output per graph: it rotates with the
            input, ``y(u . cloud) = D(R_u) y(cloud)``; ``out_channels`` defaults to its
            dimension (and must equal it if given).
        max_num_neighbors: uniform subsampling of lifted neighbourhoods.
        lift_neighbors: the original code's neighbourhood instead of the base graph: each
            lifted node attends to its ``lift_neighbors`` nearest lifted nodes of its cloud
            in the log-map distance ``||log(g_i^{-1} g_j)||``, itself included (ties kept
            together, so exact under a finite lift); ``max_num_neighbors`` then samples a
            random subset of them (the paper's QM9 setting: 25 nearest, 20 sampled, which
            is invariant in distribution only). Excludes ``radius`` and ``log_threshold``
            (see :func:`~pyg_lie.nn.lifted_edges.lifted_knn_edges`).
        log_threshold, distance_weights: log-map distance threshold
            (see :mod:`pyg_lie.nn.lifted_edges`).
        use_invariants: feed the orbit invariants (SO(n): radius) to the
            location attention.
        head_layers: linear maps of the output MLP after pooling.
        seed: seed of the evaluation-mode Haar lift and subsampling.
        **attention_kwargs: ``content``, ``location``, ``combine``,
            ``normalization``, ``kernel_dim``, ``kernel_layers``, ``kernel_per_head``, ``mlp_ratio``,
            ``dropout`` (see :class:`~pyg_lie.nn.LieSelfAttention`).

    Edge features: with ``edge_dim`` (passed on to the attention) the model takes
    ``edge_attr (E, edge_dim)`` on a base graph ``edge_index`` given to :meth:`forward`; every
    lifted edge carries the features of the base edge it lifts (also after subsampling and
    the log-map threshold), and they enter each layer's score. Invariant edge features
    (distances, bond types) keep the model invariant.
    """

    def __init__(self, group: Union[str, LieGroup], in_channels: Optional[int] = None,
                 hidden_channels: Optional[int] = None, out_channels: Optional[int] = None,
                 num_layers: int = 4, heads: int = 4, lift_samples: int = 1,
                 radius: Optional[float] = None, lift: str = "haar", *, subgroup=None,
                 irreps_in=None, irreps_out=None,
                 max_num_neighbors: Optional[int] = None, lift_neighbors: Optional[int] = None,
                 log_threshold: Optional[float] = None,
                 distance_weights: Optional[Dict[str, float]] = None, use_invariants: bool = True,
                 head_layers: int = 3, seed: int = 0, **attention_kwargs):
        super().__init__()
        self.group = get_group(group)
        if hidden_channels is None:
            raise TypeError("LieTransformer() missing required argument 'hidden_channels'")
        self.irreps_in = self.irreps_out = None
        if irreps_in is not None or irreps_out is not None:
            from ..interop.e3nn import as_irreps, check_rotation_group
            check_rotation_group(self.group, "irreps_in / irreps_out")
            if irreps_in is not None:
                self.irreps_in = as_irreps(irreps_in, "irreps_in")
                in_channels = _irreps_channels(self.irreps_in, in_channels, "in")
            if irreps_out is not None:
                self.irreps_out = as_irreps(irreps_out, "irreps_out")
                out_channels = _irreps_channels(self.irreps_out, out_channels, "out")
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels)):
            if v is None:
                raise TypeError(f"LieTransformer() missing required argument '{name}' (or pass "
                                f"irreps_{name[:-9]}=... with e3nn irreps)")
        for name, v in (("in_channels", in_channels), ("hidden_channels", hidden_channels),
                        ("out_channels", out_channels), ("heads", heads), ("head_layers", head_layers)):
            positive_int(name, v)
        nonnegative_int("num_layers", num_layers)
        if max_num_neighbors is not None:
            positive_int("max_num_neighbors", max_num_neighbors)
        if lift_neighbors is not None:
            positive_int("lift_neighbors", lift_neighbors)
            for name, value in (("radius", radius), ("log_threshold", log_threshold)):
                if value is not None:
                    raise ValueError(f"lift_neighbors and {name} both choose the neighbourhood; pass one of them")
        self.lift_neighbors = lift_neighbors
        check_distance_weights(self.group, distance_weights)
        self.in_channels, self.hidden_channels, self.out_channels = in_channels, hidden_channels, out_channels
        self.num_layers, self.heads = num_layers, heads
        self.radius = optional_length("radius", radius, "all pairs of each cloud")
        self.max_num_neighbors = max_num_neighbors
        self.log_threshold = optional_length("log_threshold", log_threshold, "no threshold")
        self.distance_weights = distance_weights
        self.seed = seed
        if self.irreps_in is not None:
            from ..interop.e3nn import IrrepsLift
            self.lift = IrrepsLift(self.irreps_in, self.group, lift_samples, mode=lift, subgroup=subgroup,
                                   seed=seed)
        else:
            self.lift = Lift(self.group, lift_samples, mode=lift, subgroup=subgroup, seed=seed)
        self.invariant_dim = _orbit_dim(self.group) if use_invariants else 0
        self.edge_dim = attention_kwargs.get("edge_dim")
        self.embed = Linear(in_channels, hidden_channels)
        self.blocks = ModuleList([
            LieTransformerBlock(hidden_channels, self.group, heads, invariant_dim=self.invariant_dim,
                                **attention_kwargs)
            for _ in range(num_layers)])
        self.norm = LayerNorm(hidden_channels)
        if self.irreps_out is not None:  # head per lifted node, then rotate back and average
            from ..interop.e3nn import IrrepsPool
            self.pool = IrrepsPool(self.irreps_out, "mean")
        else:
            self.pool = GroupPool("mean")
        mods = []
        for _ in range(head_layers - 1):
            mods += [Linear(hidden_channels, hidden_channels), SiLU()]
        mods.append(Linear(hidden_channels, out_channels))
        self.head = Sequential(*mods)

    @property
    def lift_samples(self) -> int:
        return self.lift.num_samples

    def reset_parameters(self) -> None:
        self.embed.reset_parameters()
        for b in self.blocks:
            b.reset_parameters()
        self.norm.reset_parameters()
        for mod in self.head:
            if isinstance(mod, Linear):
                mod.reset_parameters()

    @torch.compiler.disable
    def _graph(self, pos: Tensor, batch: Optional[Tensor], g: Tensor, transpose: bool,
               base_edge_index: Optional[Tensor] = None, index: Optional[Tensor] = None):
        """Lifted edges, their CSR structure (with the transposed pattern when gradients
        are on) and, with ``index`` (the point of every lifted node), the base edge of every
        lifted edge. Their sizes depend on the data, so under ``torch.compile`` this runs
        eagerly (one graph break) and the structure keeps its complete-clouds fast path."""
        gen = None if self.training else torch.Generator().manual_seed(self.seed + 1)
        edge_index = lifted_edges(pos, batch, self.lift.num_samples, self.radius, g=g,
                                  group=self.group, max_num_neighbors=self.max_num_neighbors,
                                  log_threshold=self.log_threshold,
                                  distance_weights=self.distance_weights, generator=gen,
                                  edge_index=base_edge_index, nearest=self.lift_neighbors)
        base = None if index is None else _base_edges(base_edge_index, edge_index, index, pos.size(0))
        return edge_index, CSRStructure.build(edge_index, g.size(0), transpose=transpose), base

    def point_features(self, pos: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        """The features used for ``x=None``: ``(N, 1)`` distances of the points to the centroid
        of their cloud, invariant under every group of this model (rotations about the origin
        move the centroid with the points), so the output depends on the geometry for every
        group, T(n) included (constant features would make every softmax average identical
        values)."""
        if batch is None:
            centre = pos.mean(0, keepdim=True).expand_as(pos)
        else:
            checks.batch_vector(batch, pos.size(0), "point")
            size = int(batch.max()) + 1 if batch.numel() else 0
            centre = scatter(pos, batch, dim=0, dim_size=size, reduce="mean")[batch]
        return (pos - centre).norm(dim=-1, keepdim=True)

    def lifted_features(self, x: Optional[Tensor], pos: Tensor, batch: Optional[Tensor] = None,
                        stabilizer: Optional[Tensor] = None, edge_index: Optional[Tensor] = None,
                        edge_attr: Optional[Tensor] = None):
        """Equivariant features of the lifted nodes (``x``, ``edge_index``, ``edge_attr``: see
        :meth:`forward`).

        Returns:
            ``(h (M, hidden), lifted: LiftedPoints, edge_index (2, E))``.
        """
        if x is None:
            if self.irreps_in is not None or self.in_channels != 1:
                raise ValueError(f"x=None uses one invariant feature per point (its distance to the cloud's "
                                 f"centroid), which needs in_channels=1 and no irreps_in; this model has "
                                 f"in_channels={self.in_channels}: pass x")
            if not (isinstance(pos, Tensor) and pos.dim() == 2):
                raise ValueError(f"pos must have shape (N, n), got {getattr(pos, 'shape', type(pos).__name__)}")
            x = self.point_features(pos, batch).to(self.embed.weight.dtype)
        lifted: LiftedPoints = self.lift(x, pos, batch, stabilizer=stabilizer)  # validates x, pos, batch
        if x.size(1) != self.in_channels:
            raise ValueError(f"x must have {self.in_channels} channels (in_channels), got {x.size(1)}")
        checks.floating("x", x, like=self.embed.weight)
        if self.lift_neighbors is not None and edge_index is not None:
            raise ValueError("this model chooses its neighbourhoods by lift_neighbors (log-map nearest lifted "
                             "nodes); a base graph edge_index cannot be used with it")
        edge_attr = self._check_edge_attr(edge_attr, edge_index)
        edge_index, csr, base = self._graph(pos.detach(), batch, lifted.g, torch.is_grad_enabled(), edge_index,
                                            None if edge_attr is None else lifted.index)
        if edge_attr is not None:  # every lifted edge carries its base edge's features
            edge_attr = edge_attr[base]
        inv = None
        if self.invariant_dim > 0:
            inv = self.group.orbit_invariants(pos)[lifted.index].to(x.dtype)
        h = self.embed(lifted.x)
        rel = self.group.relative_log(lifted.g, edge_index, one_sided_cut=True)  # shared by all blocks
        for block in self.blocks:
            h = block(h, edge_index, lifted.g, inv, edge_attr=edge_attr, rel_log=rel, csr=csr)
        return self.norm(h), lifted, edge_index

    def _check_edge_attr(self, edge_attr: Optional[Tensor], edge_index: Optional[Tensor]) -> Optional[Tensor]:
        """``edge_attr`` as ``(E, edge_dim)`` after the checks the lifting needs (the layers
        check the rest: dtype, device)."""
        if self.edge_dim is None:
            if edge_attr is not None:
                raise ValueError("edge_attr was given but the model was built without edge features; construct "
                                 "it with edge_dim=edge_attr.size(-1)")
            return None
        if edge_attr is None or edge_index is None:
            raise ValueError(f"the model was built with edge_dim={self.edge_dim}: pass the base graph edge_index "
                             f"and its features edge_attr (E, {self.edge_dim})")
        if isinstance(edge_attr, Tensor) and edge_attr.dim() == 1 and self.edge_dim == 1:
            edge_attr = edge_attr.unsqueeze(-1)
        checks.edge_index(edge_index)
        checks.edge_features("edge_attr", edge_attr, edge_index.size(1), self.edge_dim,
                             "; one row of features per edge of edge_index")
        return edge_attr

    def forward(self, x: Optional[Tensor], pos: Tensor, batch: Optional[Tensor] = None,
                stabilizer: Optional[Tensor] = None, num_graphs: Optional[int] = None,
                edge_index: Optional[Tensor] = None, edge_attr: Optional[Tensor] = None) -> Tensor:
        """Invariant prediction ``(B, out_channels)`` (with ``irreps_out``: an
        ``irreps_out`` tensor per graph that rotates with the input).

        Args:
            x: ``(N, in_channels)`` point features (with ``irreps_in``: of that type, in
                the frame of ``pos``); ``None`` for clouds without features (ModelNet-style):
                each point then gets its distance to its cloud's centroid
                (:meth:`point_features`; needs ``in_channels=1``).
            pos: ``(N, n)`` positions.
            batch: ``(N,)`` sorted graph ids (``None``: one graph).
            stabilizer: optional fixed ``(N, K, m, m)`` stabiliser samples.
            num_graphs: number of graphs ``B`` (default ``batch.max() + 1``).
            edge_index: optional base graph ``(2, E)`` over the points (``data.edge_index``,
                e.g. from ``torch_geometric.transforms.RadiusGraph(r, loop=True)``), used
                instead of the model's own ``radius`` graph and expanded to all lift pairs;
                the graph must be built from the positions alone for the output to stay
                invariant.
            edge_attr: ``(E, edge_dim)`` features of the edges of ``edge_index`` (models built
                with ``edge_dim`` only; ``(E,)`` when ``edge_dim=1``); invariant features keep
                the output invariant.
        """
        h, lifted, _ = self.lifted_features(x, pos, batch, stabilizer, edge_index, edge_attr)
        if num_graphs is None:
            num_graphs = count_graphs(batch)
        if self.irreps_out is not None:
            return self.pool(self.head(h), lifted.g, lifted.batch, size=num_graphs)
        return self.head(self.pool(h, lifted.batch, size=num_graphs))

    def __repr__(self) -> str:
        a = self.blocks[0].attn if len(self.blocks) else None
        extra = f", normalization={a.normalization!r}" if a is not None else ""
        for name in ("irreps_in", "irreps_out"):
            if getattr(self, name) is not None:
                extra += f", {name}='{getattr(self, name)}'"
        return (f"{self.__class__.__name__}({self.group.name}, {self.in_channels}, {self.hidden_channels}, "
                f"{self.out_channels}, num_layers={self.num_layers}, heads={self.heads}, "
                f"lift_samples={self.lift.num_samples}, lift={self.lift.mode!r}, "
                + (f"lift_neighbors={self.lift_neighbors}" if self.lift_neighbors is not None
                   else f"radius={self.radius}") + f"{extra})")
