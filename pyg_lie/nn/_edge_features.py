r"""Edge features as a score term, shared by the attention layers (``edge_dim`` / ``edge_attr``).

A layer built with ``edge_dim`` maps ``edge_attr (E, edge_dim)`` linearly to one scalar per
head, ``W_e^h e_ij``, and adds it to its attention score. An extra per-edge, per-head score is
what the fused kernels already take (the location scores), so the layers keep their fast
paths. The map has no bias: a constant per head shifts every score of a target alike (the
softmax ignores it). If ``edge_attr`` is invariant under the group, so is the score term,
and the layer stays equivariant.
"""
from __future__ import annotations

from typing import Optional

from torch import Tensor
from torch.nn import Linear

from .. import _checks as checks

__all__ = ["edge_score"]


def edge_score(lin: Optional[Linear], edge_attr: Optional[Tensor], num_edges: int, x: Tensor) -> Optional[Tensor]:
    """``lin(edge_attr)`` ``(E, H)`` after the checks, or ``None`` when the layer has no edge
    features (``lin is None``) and none were passed. ``x`` gives the device for the message."""
    if lin is None:
        if edge_attr is not None:
            raise ValueError("edge_attr was given but the layer was built without edge features; construct it "
                             "with edge_dim=edge_attr.size(-1)")
        return None
    edge_dim = lin.weight.shape[1]
    if edge_attr is None:
        raise ValueError(f"the layer was built with edge_dim={edge_dim} and needs edge_attr of shape "
                         f"(E, {edge_dim}), one row per edge of edge_index; pass it, or build the layer "
                         "without edge_dim")
    if not isinstance(edge_attr, Tensor):
        raise ValueError(f"edge_attr must be a torch.Tensor of shape (E, {edge_dim}), got "
                         f"{type(edge_attr).__name__}")
    if edge_attr.dim() == 1 and edge_dim == 1:
        edge_attr = edge_attr.unsqueeze(-1)
    checks.edge_features("edge_attr", edge_attr, num_edges, edge_dim,
                         f"; it must hold one row of edge_dim={edge_dim} features per edge of edge_index "
                         "(in the order of edge_index)")
    checks.floating("edge_attr", edge_attr, lin.weight)
    if edge_attr.device != x.device:
        raise ValueError(f"edge_attr is on {edge_attr.device} but x is on {x.device}; move it with "
                         "edge_attr.to(x.device)")
    return lin(edge_attr)
