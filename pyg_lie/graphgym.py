"""GraphGym registration of the LieTransformer layers (``pyg_lie.register_graphgym()``).

PyG has no plugin discovery; GraphGym's registries are plain dicts whose
``register_*`` raise ``KeyError`` on a duplicate key, so registration is
guarded and may be called any number of times.

Registered:

* layer ``"lie_self_attention"``: :class:`~pyg_lie.nn.LieSelfAttention` with
  ``dim_in -> dim_out``; the batch must carry the lifted group elements in
  ``batch.g`` (``(N, m, m)``); the group is ``pyg_lie.graphgym.GRAPHGYM_GROUP``
  (default ``"SE2"``; set it before GraphGym builds the model);
* layer ``"lie_transformer_block"``: :class:`~pyg_lie.nn.LieTransformerBlock`
  (requires ``dim_in == dim_out``);
* pooling ``"group_mean"``: :class:`~pyg_lie.nn.GroupPool` (mean over lifted nodes).
"""
from __future__ import annotations

import torch

__all__ = ["register_graphgym", "GRAPHGYM_GROUP", "LAYER_NAMES"]

GRAPHGYM_GROUP = "SE2"
LAYER_NAMES = ("lie_self_attention", "lie_transformer_block")
_HEADS = 4


def _heads(dim: int) -> int:
    for h in (_HEADS, 2, 1):
        if dim % h == 0:
            return h
    return 1


class GraphGymLieSelfAttention(torch.nn.Module):
    """GraphGym wrapper: ``batch.x <- LieSelfAttention(batch.x, batch.edge_index, batch.g)``."""

    def __init__(self, layer_config, **kwargs):
        super().__init__()
        from .nn.lie_self_attention import LieSelfAttention
        self.model = LieSelfAttention(layer_config.dim_in, layer_config.dim_out, GRAPHGYM_GROUP,
                                      heads=_heads(layer_config.dim_out), bias=layer_config.has_bias)

    def forward(self, batch):
        batch.x = self.model(batch.x, batch.edge_index, batch.g)
        return batch


class GraphGymLieTransformerBlock(torch.nn.Module):
    """GraphGym wrapper of :class:`~pyg_lie.nn.LieTransformerBlock`."""

    def __init__(self, layer_config, **kwargs):
        super().__init__()
        from .nn.lie_transformer_block import LieTransformerBlock
        if layer_config.dim_in != layer_config.dim_out:
            raise ValueError(f"lie_transformer_block needs dim_in == dim_out, got {layer_config.dim_in} "
                             f"and {layer_config.dim_out}")
        self.model = LieTransformerBlock(layer_config.dim_in, GRAPHGYM_GROUP, heads=_heads(layer_config.dim_in),
                                         dropout=layer_config.dropout)

    def forward(self, batch):
        batch.x = self.model(batch.x, batch.edge_index, batch.g)
        return batch


def _group_mean(x, batch, size=None):
    from .nn.group_pool import GroupPool
    return GroupPool("mean")(x, batch, size)


def register_graphgym() -> dict:
    """Register the layers and the pooling in GraphGym (idempotent).

    Returns:
        ``{name: registered object}`` of what is registered now.
    """
    import warnings
    with warnings.catch_warnings():  # GraphGym warns when pytorch_lightning is missing
        warnings.simplefilter("ignore")
        from torch_geometric.graphgym import register as reg
    out = {}
    for name, cls in (("lie_self_attention", GraphGymLieSelfAttention),
                      ("lie_transformer_block", GraphGymLieTransformerBlock)):
        if name not in reg.layer_dict:
            reg.register_layer(name, cls)
        out[name] = reg.layer_dict[name]
    if "group_mean" not in reg.pooling_dict:
        reg.register_pooling("group_mean", _group_mean)
    out["group_mean"] = reg.pooling_dict["group_mean"]
    return out
