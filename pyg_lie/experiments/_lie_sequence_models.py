"""Model variants of the Lie-sequence experiment's ablation (``--score-coords``, ``--score-init``)."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..models import LieAlgebraTransformer, build_model

__all__ = ["PaperCoordinateTransformer", "make_model", "set_score_init"]


def _paper_scale(group) -> Tensor:
    """Per-coordinate factor from pyg_lie's algebra coordinates to the paper's: the rotation,
    scale and shear coordinates of the Frobenius-orthonormal basis are ``sqrt(2)`` x the rotation
    angle (rotation vector), log-scale and shear parameters; translations are the same."""
    scale = torch.ones(group.dim, dtype=torch.float64)
    for name, sl in group.blocks.items():
        if name != "translation":
            scale[sl] = 1.0 / math.sqrt(2.0)
    return scale


class PaperCoordinateTransformer(LieAlgebraTransformer):
    """:class:`~pyg_lie.models.LieAlgebraTransformer` whose attention layers (scores and value
    pathway) see the relative logs in the paper's coordinates; the head, the loss and the
    pose error keep pyg_lie's. The rescaling is per block, so the model stays equivariant."""

    def __init__(self, group, **kwargs) -> None:
        super().__init__(group, **kwargs)
        self.register_buffer("coordinate_scale", _paper_scale(self.group).float(), persistent=False)

    def _attend(self, layer, h, edge_index, g, w, valid):
        return super()._attend(layer, h, edge_index, g, w * self.coordinate_scale.to(w.dtype), valid)


def set_score_init(model, ratio: float) -> None:
    """Start every closed-form block weight at ``ratio`` x its head's temperature (``tau``
    stays at the paper's ``softplus(0)``)."""
    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"ratio must be a finite number > 0, got {ratio!r}")
    with torch.no_grad():
        for attn in model.attn:
            tau = torch.nn.functional.softplus(attn.tau_raw)
            target = ratio * tau[:, None].expand_as(attn.lambda_raw)
            attn.lambda_raw.copy_(target + torch.log(-torch.expm1(-target)))  # softplus^-1


def make_model(group: str, score: str, hidden: int, layers: int, heads: int, head: str,
               coords: str = "algebra", score_init: float = 1.0):
    """The experiment's model: G (``closed_form``), C (``mlp``) or A (``vector``), with the
    attention in ``coords`` (``algebra`` or ``paper``) and G's block weights started at
    ``score_init`` x the temperature. A has no relative logs and no block weights: both
    options leave it unchanged."""
    if coords not in ("algebra", "paper"):
        raise ValueError(f"coords must be 'algebra' or 'paper', got {coords!r}")
    kw = dict(hidden_channels=hidden, num_layers=layers, heads=heads, head=head)
    if coords == "paper" and score != "vector":
        model = PaperCoordinateTransformer(group, score=score, **kw)
    else:
        model = build_model(group, score, **kw)
    if score == "closed_form" and score_init != 1.0:
        set_score_init(model, score_init)
    return model
