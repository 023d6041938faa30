r"""PyG explainability for the attention layers: edge masks that act *before* normalisation.

PyG's :class:`~torch_geometric.explain.Explainer` sets a soft edge mask ``m (E,)`` on every
:class:`~torch_geometric.nn.conv.MessagePassing` layer (``explain=True``, ``_edge_mask``,
``_apply_sigmoid``) and, by default, multiplies each *message* by it. For attention that is
the wrong place: after a softmax, scaling a message by ``m_e`` neither removes the edge from
the normalisation nor gives the other edges its weight, so the mask's gradient does not
say what removing the edge would do. The attention layers instead use the mask as a
log-bias on the scores,

.. math::
    w_e = \frac{m_e \exp(s_e)}{\sum_{e' \to i} m_{e'} \exp(s_{e'})}
        = \operatorname{softmax}_{e \to i}(s_e + \log m_e),

so that with a 0/1 mask the output equals the output on the graph without the masked
edges (a node whose edges are all masked receives zero, as a node without edges does), and
the constant normalisation becomes ``m_e s_e / sum_{e' -> i} m_{e'}``. Their
``explain_message`` then passes messages through unchanged.

A mask that is the same on every edge of a target is a constant log-bias, which the softmax
ignores: only the *relative* mask values matter. So an explainer whose loss is at its minimum
for the unmasked model (GNNExplainer in ``"regression"`` mode against the model's own
prediction, with its near-uniform initial mask) gets no gradient from the model; use a
classification mode or a phenomenon target with softmax attention. For the same reason an
edge that is its target's only incoming edge always has weight 1, whatever its mask value:
its importance is 0 (removing it and keeping it differ, but no soft mask value in between
changes the output).

Every attention layer therefore has an ``explain_mode`` (constructor argument and attribute):

* ``"score"`` (default): the mask acts on the scores as above (0/1 mask == edge removal);
* ``"message"``: PyG's default, the mask multiplies each message *after* the normalisation,
  ``out_i = sum_j m_ij w_ij v_j``, so every edge, a lone incoming one included, gets a
  gradient; a 0/1 mask then no longer equals removing the edges (the remaining weights of a
  target are not renormalised).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter

__all__ = ["EXPLAIN_MODES", "check_explain_mode", "explain_mask", "explain_message", "masked_edge_attention",
           "score_mask"]

#: where an explainer's edge mask acts: on the scores (before the normalisation) or on the messages
EXPLAIN_MODES = ("score", "message")


def check_explain_mode(value) -> str:
    """``value`` if it is one of :data:`EXPLAIN_MODES`, else a ``ValueError`` naming ``explain_mode``."""
    if not isinstance(value, str) or value not in EXPLAIN_MODES:
        raise ValueError(f"explain_mode must be one of {EXPLAIN_MODES} ('score': the explainer's edge mask is a "
                         f"log-bias on the attention scores, a 0/1 mask equals removing the edges; 'message': it "
                         f"multiplies the messages after the softmax, PyG's default), got {value!r}")
    return value


def explain_mask(module, num_edges: int) -> Optional[Tensor]:
    """The edge mask ``(E,)`` PyG's explainer set on ``module`` (sigmoid applied where asked),
    or ``None`` when the layer is not being explained."""
    if not getattr(module, "explain", None):
        return None
    mask = getattr(module, "_edge_mask", None)
    if mask is None:
        raise ValueError(f"{type(module).__name__} is in explain mode but has no edge mask; set one with "
                         "torch_geometric.explain.algorithm.utils.set_masks(model, mask, edge_index)")
    if mask.dim() != 1 or mask.numel() != num_edges:
        raise ValueError(f"the explainer's edge mask must have one entry per edge of edge_index ({num_edges}), "
                         f"got shape {tuple(mask.shape)}")
    return mask.sigmoid() if getattr(module, "_apply_sigmoid", True) else mask


def score_mask(module, num_edges: int) -> Optional[Tensor]:
    """The edge mask ``(E,)`` that acts on the scores of ``module``: :func:`explain_mask` in
    ``explain_mode="score"``; ``None`` when the layer is not being explained or in
    ``"message"`` mode (the mask is checked all the same; the layer's :func:`explain_message`
    then applies it)."""
    mask = explain_mask(module, num_edges)
    if mask is None or check_explain_mode(getattr(module, "explain_mode", "score")) == "message":
        return None
    return mask


def explain_message(module, inputs: Tensor, dim_size: Optional[int]) -> Tensor:
    """The messages ``inputs (E, ...)`` under an explainer: unchanged in ``"score"`` mode (the mask
    already acted on the scores), multiplied by the mask in ``"message"`` mode (PyG's
    :meth:`~torch_geometric.nn.conv.MessagePassing.explain_message`)."""
    if getattr(module, "explain_mode", "score") == "message":
        from torch_geometric.nn import MessagePassing
        return MessagePassing.explain_message(module, inputs, dim_size)
    return inputs


def masked_edge_attention(score: Tensor, index: Tensor, num_nodes: int, mask: Tensor,
                          normalization: str = "softmax") -> Tensor:
    r"""Attention weights ``(E, H)`` of ``score (E, H)`` over each target's incoming edges
    (``index (E,)`` their targets) with the edge mask ``mask (E,)`` in ``[0, 1]`` acting before
    the normalisation (see the module docstring). Never NaN: a target whose edges all have
    ``m = 0`` gets zero weights."""
    m = mask.to(score.dtype).view(-1, *([1] * (score.dim() - 1)))
    tiny = torch.finfo(score.dtype).tiny
    if normalization in ("mean", "constant"):
        total = scatter(m.expand_as(score), index, dim=0, dim_size=num_nodes, reduce="sum")
        return score * m / total.clamp_min(tiny)[index]
    if normalization != "softmax":
        raise ValueError(f"normalization must be 'softmax' or 'constant' (alias 'mean'), got {normalization!r}")
    z = score + m.clamp_min(tiny).log()
    zmax = scatter(z.detach(), index, dim=0, dim_size=num_nodes, reduce="max")[index]
    e = (z - zmax).exp() * (m > 0).to(score.dtype)  # each term <= 1; masked-out terms exactly 0
    total = scatter(e, index, dim=0, dim_size=num_nodes, reduce="sum")
    return e / total.clamp_min(tiny)[index]
