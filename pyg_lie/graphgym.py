r"""GraphGym registration of the attention layers (``pyg_lie.register_graphgym()``).

GraphGym builds a model from its global config ``cfg``; :func:`register_graphgym` adds a
``cfg.pyg_lie`` section with the settings of these layers and registers them under
names that ``cfg.gnn.layer_type`` can take. PyG has no plugin discovery and its
``register_*`` raise ``KeyError`` on a duplicate key, so registration is guarded and may be
called any number of times.

Layers (``cfg.gnn.layer_type``; ``dim_in -> dim_out`` from GraphGym's layer config, passed
as ``out_channels``, which is always the output width; the heads must divide it):

* ``"lie_self_attention"``: :class:`~pyg_lie.nn.LieSelfAttention` on ``batch.x``,
  ``batch.edge_index``, ``batch.g``;
* ``"lie_transformer_block"``: :class:`~pyg_lie.nn.LieTransformerBlock` (``dim_in == dim_out``),
  same inputs;
* ``"lie_algebra_attention"``: :class:`~pyg_lie.nn.LieAlgebraAttention`, same inputs;
* ``"s2_attention_conv"``: :class:`~pyg_lie.nn.S2AttentionConv` on ``batch.x``,
  ``batch.edge_index`` and, if present, ``batch.quad_weights``;
* ``"equivariant_self_attention"``: :class:`~pyg_lie.vit.EquivariantSelfAttention` on
  ``batch.x``, ``batch.edge_index`` (``dim_in == dim_out``, a multiple of the order of
  ``cfg.pyg_lie.finite_group``: regular fields).

Pooling ``"group_mean"``: :class:`~pyg_lie.nn.GroupPool` (mean over lifted nodes).

Config keys (``cfg.pyg_lie.*``, defaults in :data:`CONFIG_DEFAULTS`):

* ``group`` (``"SE2"``): the Lie group of the ``g`` layers and of the lift;
* ``lift_samples`` (1), ``lift`` (``"haar"`` or ``"finite"``), ``lift_seed`` (-1: fresh Haar
  samples at every call; else fixed): the lift of :func:`lift_transform`;
* ``radius`` (0.0: keep the dataset's edges; else :class:`~torch_geometric.transforms.RadiusGraph`
  with ``max_num_neighbors`` (64) before the lift, for which :func:`lift_transform` calls
  :func:`pyg_lie.enable_pyg_radius`);
* ``heads`` (4), ``normalization`` (``"softmax"``), ``kernel_dim`` (16, the width of the
  location MLP): attention options;
* ``score`` (``"closed_form"``), ``chart`` (``"mask"``): :class:`~pyg_lie.nn.LieAlgebraAttention`;
* ``use_edge_attr`` (False): the ``g`` layers take ``batch.edge_attr`` as edge features
  (``edge_dim`` = GraphGym's ``cfg.dataset.edge_dim``; a learned score term per head, see
  :class:`~pyg_lie.nn.LieSelfAttention`); keep them invariant (e.g. distances from
  :class:`~torch_geometric.transforms.Distance` before the lift, which copies them to the lift pairs);
* ``use_qknorm`` (False): :class:`~pyg_lie.nn.S2AttentionConv`;
* ``finite_group`` (``"D4"``): the group of ``equivariant_self_attention``'s regular fields.

The batch must carry ``g``: :func:`lift_transform` (a :class:`~pyg_lie.transforms.LiftPositions`
built from these keys) makes it from ``pos``; pass it as the dataset's ``transform``.
"""
from __future__ import annotations

import threading
import warnings

import torch

__all__ = ["register_graphgym", "lift_transform", "LAYER_NAMES", "CONFIG_DEFAULTS"]

LAYER_NAMES = ("lie_self_attention", "lie_transformer_block", "lie_algebra_attention",
               "s2_attention_conv", "equivariant_self_attention")

#: ``cfg.pyg_lie`` keys and their defaults.
CONFIG_DEFAULTS = {
    "group": "SE2",
    "lift_samples": 1,
    "lift": "haar",
    "lift_seed": -1,
    "radius": 0.0,
    "max_num_neighbors": 64,
    "heads": 4,
    "normalization": "softmax",
    "kernel_dim": 16,
    "score": "closed_form",
    "chart": "mask",
    "use_edge_attr": False,
    "use_qknorm": False,
    "finite_group": "D4",
}

_LOCK = threading.Lock()


def _graphgym():
    with warnings.catch_warnings():  # GraphGym warns at import when pytorch_lightning is missing
        warnings.simplefilter("ignore")
        from torch_geometric.graphgym import register
        from torch_geometric.graphgym.config import cfg
    return register, cfg


def _set_config(cfg) -> None:
    """GraphGym config hook: add ``cfg.pyg_lie`` (called by GraphGym's ``set_cfg``)."""
    from yacs.config import CfgNode

    cfg.pyg_lie = CfgNode(dict(CONFIG_DEFAULTS))


def _options():
    _, cfg = _graphgym()
    if "pyg_lie" not in cfg:
        _set_config(cfg)
    return cfg.pyg_lie


def _heads(opts, dim: int, name: str) -> int:
    heads = int(opts.heads)
    if heads < 1 or dim % heads:
        raise ValueError(f"{name}: cfg.pyg_lie.heads ({heads}) must be >= 1 and divide the layer width "
                         f"({dim}); change cfg.pyg_lie.heads or cfg.gnn.dim_inner")
    return heads


def _edge_kwargs(opts, layer_config) -> dict:
    """``edge_dim`` for the layer when ``cfg.pyg_lie.use_edge_attr`` is set, else nothing."""
    if not bool(opts.use_edge_attr):
        return {}
    edge_dim = int(layer_config.edge_dim)
    if edge_dim < 1:
        raise ValueError(f"cfg.pyg_lie.use_edge_attr needs the width of batch.edge_attr in cfg.dataset.edge_dim, "
                         f"got {edge_dim}")
    return {"edge_dim": edge_dim}


def _batch_edge_attr(batch, module, name: str):
    """``batch.edge_attr`` for a layer built with edge features, else ``None``."""
    if not module.use_edge_attr:
        return None
    edge_attr = getattr(batch, "edge_attr", None)
    if edge_attr is None:
        raise ValueError(f"{name}: cfg.pyg_lie.use_edge_attr is set but the batch has no edge_attr; add edge "
                         "features (e.g. torch_geometric.transforms.Distance(norm=False) before the lift) or "
                         "set cfg.pyg_lie.use_edge_attr = False")
    return edge_attr


def _batch_g(batch, name: str):
    g = getattr(batch, "g", None)
    if g is None:
        raise ValueError(f"{name} needs the group elements in batch.g; add pyg_lie.graphgym.lift_transform() "
                         "(or pyg_lie.transforms.LiftPositions) to the dataset's transform")
    return g


class GraphGymLieSelfAttention(torch.nn.Module):
    """``batch.x <- LieSelfAttention(batch.x, batch.edge_index, batch.g)``."""

    def __init__(self, layer_config, **kwargs):
        super().__init__()
        from .nn.lie_self_attention import LieSelfAttention
        opts = _options()
        heads = _heads(opts, layer_config.dim_out, "lie_self_attention")
        edge = _edge_kwargs(opts, layer_config)
        self.use_edge_attr = bool(edge)
        self.model = LieSelfAttention(layer_config.dim_in, group=opts.group, heads=heads,
                                      normalization=opts.normalization, bias=layer_config.has_bias,
                                      out_channels=layer_config.dim_out,
                                      kernel_dim=int(opts.kernel_dim), **edge)

    def forward(self, batch):
        batch.x = self.model(batch.x, batch.edge_index, _batch_g(batch, "lie_self_attention"),
                             edge_attr=_batch_edge_attr(batch, self, "lie_self_attention"))
        return batch


class GraphGymLieTransformerBlock(torch.nn.Module):
    """``batch.x <- LieTransformerBlock(batch.x, batch.edge_index, batch.g)`` (pre-norm residual)."""

    def __init__(self, layer_config, **kwargs):
        super().__init__()
        from .nn.lie_transformer_block import LieTransformerBlock
        if layer_config.dim_in != layer_config.dim_out:
            raise ValueError(f"lie_transformer_block needs dim_in == dim_out, got {layer_config.dim_in} "
                             f"and {layer_config.dim_out}; set cfg.gnn.layers_pre_mp >= 1 so that the "
                             "message-passing layers see cfg.gnn.dim_inner channels")
        opts = _options()
        heads = _heads(opts, layer_config.dim_in, "lie_transformer_block")
        edge = _edge_kwargs(opts, layer_config)
        self.use_edge_attr = bool(edge)
        self.model = LieTransformerBlock(layer_config.dim_in, opts.group, heads=heads, dropout=layer_config.dropout,
                                         normalization=opts.normalization,
                                         kernel_dim=int(opts.kernel_dim), **edge)

    def forward(self, batch):
        batch.x = self.model(batch.x, batch.edge_index, _batch_g(batch, "lie_transformer_block"),
                             edge_attr=_batch_edge_attr(batch, self, "lie_transformer_block"))
        return batch


class GraphGymLieAlgebraAttention(torch.nn.Module):
    """``batch.x <- LieAlgebraAttention(batch.x, batch.edge_index, batch.g)``."""

    def __init__(self, layer_config, **kwargs):
        super().__init__()
        from .nn.lie_algebra_attention import LieAlgebraAttention
        opts = _options()
        heads = _heads(opts, layer_config.dim_out, "lie_algebra_attention")
        edge = _edge_kwargs(opts, layer_config)
        self.use_edge_attr = bool(edge)
        self.model = LieAlgebraAttention(layer_config.dim_in, group=opts.group, heads=heads, score=opts.score,
                                         chart=opts.chart, bias=layer_config.has_bias,
                                         out_channels=layer_config.dim_out,
                                         kernel_dim=int(opts.kernel_dim), **edge)

    def forward(self, batch):
        batch.x = self.model(batch.x, batch.edge_index, _batch_g(batch, "lie_algebra_attention"),
                             edge_attr=_batch_edge_attr(batch, self, "lie_algebra_attention"))
        return batch


class GraphGymS2AttentionConv(torch.nn.Module):
    """``batch.x <- S2AttentionConv(batch.x, batch.edge_index, batch.quad_weights)``
    (``quad_weights`` optional: uniform when the batch has none)."""

    def __init__(self, layer_config, **kwargs):
        super().__init__()
        from .nn.s2_attention_conv import S2AttentionConv
        opts = _options()
        heads = _heads(opts, layer_config.dim_out, "s2_attention_conv")
        self.model = S2AttentionConv(layer_config.dim_in, layer_config.dim_out, heads=heads,
                                     use_qknorm=bool(opts.use_qknorm), bias=layer_config.has_bias)

    def forward(self, batch):
        batch.x = self.model(batch.x, batch.edge_index, getattr(batch, "quad_weights", None))
        return batch


class GraphGymEquivariantSelfAttention(torch.nn.Module):
    """``batch.x <- EquivariantSelfAttention(batch.x, batch.edge_index)`` on ``dim / |G|``
    copies of the regular representation of ``cfg.pyg_lie.finite_group``. The features are
    then fields of that group; GraphGym's own pre- and post-processing layers (linear maps,
    batch norm) do not respect this, so only a network whose other layers do is equivariant."""

    def __init__(self, layer_config, **kwargs):
        super().__init__()
        from .vit import EquivariantSelfAttention, FieldType
        from .vit import get_group as finite_group
        opts = _options()
        G = finite_group(opts.finite_group)
        dim = layer_config.dim_in
        if dim != layer_config.dim_out or dim % G.order:
            raise ValueError(f"equivariant_self_attention needs dim_in == dim_out and a multiple of the order of "
                             f"cfg.pyg_lie.finite_group {G.name} ({G.order}), got {layer_config.dim_in} -> "
                             f"{layer_config.dim_out}; change cfg.gnn.dim_inner")
        self.model = EquivariantSelfAttention(FieldType.regular(G, dim // G.order), heads=int(opts.heads),
                                              bias=layer_config.has_bias)

    def forward(self, batch):
        batch.x = self.model(batch.x, batch.edge_index)
        return batch


def _group_mean(x, batch, size=None):
    from .nn.group_pool import GroupPool
    return GroupPool("mean")(x, batch, size)


_LAYERS = {
    "lie_self_attention": GraphGymLieSelfAttention,
    "lie_transformer_block": GraphGymLieTransformerBlock,
    "lie_algebra_attention": GraphGymLieAlgebraAttention,
    "s2_attention_conv": GraphGymS2AttentionConv,
    "equivariant_self_attention": GraphGymEquivariantSelfAttention,
}


def lift_transform(cfg=None):
    """The dataset transform the ``g`` layers need, from ``cfg.pyg_lie``: an optional
    :class:`~torch_geometric.transforms.RadiusGraph` (``radius > 0``), then
    :class:`~pyg_lie.transforms.LiftPositions` (``group``, ``lift_samples``, ``lift``, ``lift_seed``).
    ``cfg``: GraphGym's global config when ``None``. With ``radius > 0`` it calls
    :func:`pyg_lie.enable_pyg_radius` (PyG's radius search without pyg-lib)."""
    import torch_geometric.transforms as T

    from .interop.pyg import enable_pyg_radius
    from .transforms import LiftPositions
    register_graphgym()
    opts = _options() if cfg is None else cfg.pyg_lie
    lift = LiftPositions(opts.group, int(opts.lift_samples), mode=opts.lift,
                         seed=None if int(opts.lift_seed) < 0 else int(opts.lift_seed))
    if float(opts.radius) > 0:
        enable_pyg_radius()
        return T.Compose([T.RadiusGraph(float(opts.radius), max_num_neighbors=int(opts.max_num_neighbors)), lift])
    return lift


def register_graphgym() -> dict:
    """Register the layers, the pooling and the ``cfg.pyg_lie`` config section in GraphGym
    (idempotent). PyG itself is left as it is (see :func:`lift_transform` for the radius graph).

    Returns:
        ``{name: registered object}`` of the layers and the pooling.
    """
    reg, cfg = _graphgym()
    out = {}
    with _LOCK:
        for name, cls in _LAYERS.items():
            if name not in reg.layer_dict:
                reg.register_layer(name, cls)
            out[name] = reg.layer_dict[name]
        if "group_mean" not in reg.pooling_dict:
            reg.register_pooling("group_mean", _group_mean)
        out["group_mean"] = reg.pooling_dict["group_mean"]
        if "pyg_lie" not in reg.config_dict:
            reg.register_config("pyg_lie", _set_config)
        if "pyg_lie" not in cfg:  # GraphGym ran set_cfg at import, before this hook existed
            _set_config(cfg)
    return out
