r"""The QM9 models of ``pyg-lie train qm9``, ``train qm9-budget`` and ``bench qm9``, and their
rotation checks.

* LieTransformer presets (:data:`PRESETS`): ``small``, ``paper`` (Appendix I.2) and ``cpu``
  (the paper's architecture narrowed to 6 layers of width 96, about SchNet's parameter
  count), for T3 (one lift) and SE3 (``lift`` ``haar``, ``finite`` or ``grid``). The SE3
  presets use the paper's neighbourhood: the 25 nearest lifted points in the log-map
  distance, 20 sampled from them (Haar and grid lifts) or all 25 (finite lifts, which keeps
  the model exactly invariant to the lift's rotation group).
* PyG's :class:`~torch_geometric.nn.models.SchNet` and
  :class:`~torch_geometric.nn.models.DimeNetPlusPlus` at their default hyperparameters,
  with their radius graphs built in plain torch (:class:`MoleculeRadiusGraph`; PyG's own
  needs pyg-lib, and DimeNet's triplets need torch-sparse, neither of which installs from
  the package registry). Within a molecule of QM9 (at most 29 atoms) the graphs are those
  of PyG's defaults (``max_num_neighbors=32`` never truncates).
* :func:`random_rotations`, :func:`rotate` (SO(3) augmentation) and
  :func:`rotation_sensitivity` (the spread of a prediction over random rotations of the
  molecule).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

__all__ = ["PRESETS", "SE3_NEIGHBORS", "MODEL_KINDS", "lie_transformer_kwargs", "build_lie_transformer",
           "MoleculeRadiusGraph", "triplets", "build_schnet", "DimeNetPlusPlusQM9", "build_dimenet",
           "build_model", "random_rotations", "rotate", "rotation_sensitivity", "count_parameters"]

#: LieTransformer presets: model options shared by T3 and SE3, then per group
PRESETS: Dict[str, Dict[str, object]] = {
    "small": {"hidden": 64, "heads": 4, "content": "dot_product", "location": "mlp", "combine": "additive",
              "head_layers": 3, "layers": 2},
    "paper": {"hidden": 848, "heads": 8, "content": "linear_concat_linear", "location": "identity",
              "combine": "mlp", "head_layers": 1, "layers": {"T3": 13, "SE3": 30}, "max_neighbors": {"T3": 25}},
    "cpu": {"hidden": 96, "heads": 8, "content": "linear_concat_linear", "location": "identity",
            "combine": "mlp", "head_layers": 1, "layers": 6, "max_neighbors": {"T3": 25}},
}

#: the paper's SE3 neighbourhood: nearest lifted points in the log-map distance, and how many
#: are sampled from them (None for a finite lift: all of them, exactly invariant)
SE3_NEIGHBORS = {"nearest": 25, "sample": {"haar": 20, "grid": 20, "finite": None}}

#: the models of the QM9 harness
MODEL_KINDS = ("lie-T3", "lie-SE3", "schnet", "dimenet++")


def lie_transformer_kwargs(preset: str, group: str, lift: str = "haar", lift_samples: Optional[int] = None,
                           **overrides) -> Dict[str, object]:
    """Keyword arguments of :class:`~pyg_lie.models.LieTransformer` for a QM9 preset.

    ``preset`` in :data:`PRESETS`, ``group`` ``"T3"`` or ``"SE3"``; ``lift_samples`` defaults to
    1 (T3), 2 (SE3 Haar, the paper's) or 12 (SE3 finite / grid: the tetrahedral group);
    ``overrides`` (``hidden``, ``layers``, ``heads``, ...) win over the preset.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    if group not in ("T3", "SE3"):
        raise ValueError(f"group must be 'T3' or 'SE3' for QM9, got {group!r}")
    p = dict(PRESETS[preset])
    for key in ("layers", "max_neighbors"):  # per-group entries
        if isinstance(p.get(key), dict):
            p[key] = p[key].get(group)
    p.update({k: v for k, v in overrides.items() if v is not None})
    if group == "T3":
        k = 1
    else:
        k = lift_samples or (2 if lift == "haar" else 12)
    out = dict(hidden_channels=p["hidden"], num_layers=p["layers"], heads=p["heads"], content=p["content"],
               location=p["location"], combine=p["combine"], head_layers=p["head_layers"], lift_samples=k,
               lift=lift if group == "SE3" else "haar", kernel_dim=p.get("kernel_dim", 16))
    if group == "SE3":
        out["lift_neighbors"] = p.get("lift_neighbors", SE3_NEIGHBORS["nearest"])
        out["max_num_neighbors"] = p.get("max_neighbors") or SE3_NEIGHBORS["sample"][lift]
    elif p.get("max_neighbors") is not None:
        out["max_num_neighbors"] = p["max_neighbors"]
    return out


def build_lie_transformer(in_channels: int, preset: str = "cpu", group: str = "T3", lift: str = "haar",
                          lift_samples: Optional[int] = None, **overrides) -> nn.Module:
    """A :class:`~pyg_lie.models.LieTransformer` with one output (see :func:`lie_transformer_kwargs`)."""
    from ..models.lie_transformer import LieTransformer
    return LieTransformer(group, in_channels, out_channels=1,
                          **lie_transformer_kwargs(preset, group, lift, lift_samples, **overrides))


class MoleculeRadiusGraph(nn.Module):
    """Ordered atom pairs ``j -> i`` of one molecule closer than ``cutoff``, in plain torch.

    ``forward(pos (N, 3), batch (N,)) -> (edge_index (2, E), distance (E,))`` (the signature of
    SchNet's ``interaction_graph``); memory ``O(sum_b n_b^2)``, no pyg-lib or torch-cluster.
    """

    def __init__(self, cutoff: float) -> None:
        super().__init__()
        self.cutoff = float(cutoff)

    def forward(self, pos: Tensor, batch: Tensor) -> Tuple[Tensor, Tensor]:
        n = batch.numel()
        counts = torch.bincount(batch)
        start = torch.cumsum(counts, 0) - counts  # first atom of every molecule (batch is sorted)
        per_node = counts[batch]
        dst = torch.arange(n, device=pos.device).repeat_interleave(per_node)
        offset = torch.cumsum(per_node, 0) - per_node
        src = start[batch][dst] + torch.arange(dst.numel(), device=pos.device) - offset[dst]
        d = (pos[src] - pos[dst]).norm(dim=-1)
        keep = (src != dst) & (d < self.cutoff)
        return torch.stack([src[keep], dst[keep]]), d[keep]


def triplets(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, ...]:
    """DimeNet's triplets ``k -> j -> i`` (``k != i``) without torch-sparse.

    Args:
        edge_index: ``(2, E)``, row 0 source ``j``, row 1 target ``i``.
        num_nodes: ``N``.

    Returns:
        ``(i, j, idx_i, idx_j, idx_k, idx_kj, idx_ji)`` as PyG's ``dimenet.triplets``: the
        target and source of every edge, then per triplet its three nodes, the edge
        ``k -> j`` and the edge ``j -> i``.
    """
    src, dst = edge_index
    order = torch.argsort(dst, stable=True)  # edges grouped by target
    deg = torch.bincount(dst, minlength=num_nodes)
    ptr = torch.cumsum(deg, 0) - deg
    per_edge = deg[src]  # edges k -> j that end where j -> i starts
    idx_ji = torch.repeat_interleave(torch.arange(src.numel(), device=src.device), per_edge)
    rank = torch.arange(idx_ji.numel(), device=src.device) - (torch.cumsum(per_edge, 0) - per_edge)[idx_ji]
    idx_kj = order[ptr[src[idx_ji]] + rank]
    idx_i, idx_j, idx_k = dst[idx_ji], src[idx_ji], src[idx_kj]
    keep = idx_i != idx_k
    return dst, src, idx_i[keep], idx_j[keep], idx_k[keep], idx_kj[keep], idx_ji[keep]


def build_schnet(hidden: int = 128, interactions: int = 6, cutoff: float = 10.0) -> nn.Module:
    """PyG's SchNet (defaults: 128 channels and filters, 6 interactions, 50 Gaussians, cutoff 10
    Angstrom) with :class:`MoleculeRadiusGraph`; ``forward(z, pos, batch) -> (B, 1)``."""
    from torch_geometric.nn.models import SchNet
    return SchNet(hidden_channels=hidden, num_filters=hidden, num_interactions=interactions, num_gaussians=50,
                  cutoff=cutoff, interaction_graph=MoleculeRadiusGraph(cutoff))


def _dimenet_base():
    from torch_geometric.nn.models import DimeNetPlusPlus
    return DimeNetPlusPlus


class DimeNetPlusPlusQM9(nn.Module):
    """PyG's :class:`~torch_geometric.nn.models.DimeNetPlusPlus` (its blocks and parameters) run
    on :class:`MoleculeRadiusGraph` and :func:`triplets`, so that it trains without pyg-lib and
    torch-sparse. Defaults: PyG's QM9 configuration (hidden 128, 4 blocks, interaction
    embedding 64, basis embedding 8, output embedding 256, 7 spherical and 6 radial bases,
    cutoff 5 Angstrom). ``forward(z (N,), pos (N, 3), batch (N,)) -> (B, out_channels)``."""

    def __init__(self, out_channels: int = 1, hidden_channels: int = 128, num_blocks: int = 4,
                 int_emb_size: int = 64, basis_emb_size: int = 8, out_emb_channels: int = 256,
                 num_spherical: int = 7, num_radial: int = 6, cutoff: float = 5.0) -> None:
        super().__init__()
        self.net = _dimenet_base()(hidden_channels=hidden_channels, out_channels=out_channels,
                                   num_blocks=num_blocks, int_emb_size=int_emb_size,
                                   basis_emb_size=basis_emb_size, out_emb_channels=out_emb_channels,
                                   num_spherical=num_spherical, num_radial=num_radial, cutoff=cutoff)
        self.graph = MoleculeRadiusGraph(cutoff)

    def reset_parameters(self) -> None:
        self.net.reset_parameters()

    def forward(self, z: Tensor, pos: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        net = self.net
        if batch is None:
            batch = torch.zeros_like(z)
        n = z.size(0)
        edge_index, dist = self.graph(pos, batch)
        i, j, idx_i, idx_j, idx_k, idx_kj, idx_ji = triplets(edge_index, n)
        # DimeNet++'s angle at j between j -> i and k -> j
        v_ij, v_jk = pos[idx_i] - pos[idx_j], pos[idx_j] - pos[idx_k]
        angle = torch.atan2(torch.linalg.cross(v_ij, v_jk, dim=1).norm(dim=-1), (v_ij * v_jk).sum(-1))
        rbf = net.rbf(dist)
        sbf = net.sbf(dist, angle, idx_kj)
        h = net.emb(z, rbf, i, j)
        out = net.output_blocks[0](h, rbf, i, num_nodes=n)
        for block, readout in zip(net.interaction_blocks, net.output_blocks[1:]):
            h = block(h, rbf, sbf, idx_kj, idx_ji)
            out = out + readout(h, rbf, i, num_nodes=n)
        return scatter(out, batch, dim=0, reduce="sum")


def build_dimenet(**kwargs) -> nn.Module:
    """:class:`DimeNetPlusPlusQM9` with one output."""
    return DimeNetPlusPlusQM9(**kwargs)


def build_model(kind: str, in_channels: int, preset: str = "cpu", lift: str = "haar",
                lift_samples: Optional[int] = None, **overrides) -> Tuple[nn.Module, Callable]:
    """A model of :data:`MODEL_KINDS` and its ``predict(model, batch) -> (B,)``.

    ``lie-T3`` / ``lie-SE3`` take ``preset``, ``lift``, ``lift_samples`` and the preset's
    overrides; ``schnet`` and ``dimenet++`` are PyG's models at their defaults.
    """
    if kind in ("lie-T3", "lie-SE3"):
        model = build_lie_transformer(in_channels, preset, kind[4:], lift, lift_samples, **overrides)
        return model, lambda m, b: m(b.x, b.pos, b.batch, num_graphs=b.num_graphs).squeeze(-1)
    if kind == "schnet":
        return build_schnet(), lambda m, b: m(b.z, b.pos, b.batch).squeeze(-1)
    if kind == "dimenet++":
        return build_dimenet(), lambda m, b: m(b.z, b.pos, b.batch).squeeze(-1)
    raise ValueError(f"model must be one of {MODEL_KINDS}, got {kind!r}")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def random_rotations(n: int, generator: Optional[torch.Generator] = None, dtype=torch.float32,
                     device=None) -> Tensor:
    """``(n, 3, 3)`` Haar-random rotations."""
    from ..groups import SO3
    return SO3().random(n, generator=generator, dtype=torch.float64).to(dtype=dtype, device=device)


def rotate(pos: Tensor, batch: Tensor, rotations: Tensor) -> Tensor:
    """Rotate every molecule about its centroid: ``pos (N, 3)``, ``batch (N,)``,
    ``rotations (B, 3, 3)`` -> ``(N, 3)``."""
    centre = scatter(pos, batch, dim=0, dim_size=rotations.size(0), reduce="mean")[batch]
    return torch.einsum("nij,nj->ni", rotations[batch].to(pos.dtype), pos - centre) + centre


@torch.no_grad()
def _rotated_predictions(model: nn.Module, predict: Callable, loader, rotations: int, seed: int,
                         device=None) -> Tensor:
    """``(rotations, molecules)`` predictions for random rotations of every molecule."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    out = []
    for batch in loader:
        batch = batch.to(device) if device is not None else batch
        preds = []
        for _ in range(rotations):
            b = batch.clone()
            b.pos = rotate(batch.pos, batch.batch, random_rotations(batch.num_graphs, gen, batch.pos.dtype,
                                                                    batch.pos.device))
            preds.append(predict(model, b).double().cpu())
        out.append(torch.stack(preds))
    return torch.cat(out, dim=1) if out else torch.zeros(rotations, 0, dtype=torch.float64)


def rotation_sensitivity(model: nn.Module, predict: Callable, loader, rotations: int = 8, scale: float = 1.0,
                         seed: int = 0, device=None, relative: bool = False) -> float:
    """Mean over molecules of the standard deviation of the prediction over ``rotations``
    random rotations of the molecule (about its centroid), times ``scale`` (to the target's
    unit); 0 for an exactly rotation-invariant model. ``relative``: divided instead by the
    standard deviation of the (rotation-averaged) prediction across molecules, a scale-free
    number that also means something for an untrained model."""
    preds = _rotated_predictions(model, predict, loader, rotations, seed, device)
    if preds.size(1) == 0:
        return float("nan")
    spread = float(preds.std(dim=0).mean())
    if relative:
        return spread / max(float(preds.mean(dim=0).std()), 1e-300)
    return spread * scale
