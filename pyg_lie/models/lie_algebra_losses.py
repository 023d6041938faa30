r"""Losses and metrics of the sequence-completion models (:class:`~pyg_lie.models.LieAlgebraTransformer`,
:class:`~pyg_lie.models.VectorTokenTransformer`)."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Optional, Union

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from ..groups import LieGroup, get_group
from ..nn.lie_algebra_attention import chart_safe_log

if TYPE_CHECKING:
    from .lie_algebra_transformer import LieAlgebraOutput, _TokenTransformer

__all__ = ["pose_error", "completion_loss", "equivariance_error"]


def pose_error(group: Union[str, LieGroup], pred: Tensor, target: Tensor) -> Tensor:
    r"""Log-norm distance ``||vee(log(target^{-1} pred))||``, ``(B,)``.

    Outside the chart (affine groups only) the log does not exist; there the
    Frobenius distance ``||target^{-1} pred - I||_F`` is returned instead (it
    agrees with the log-norm to first order) -- never NaN.
    """
    group = get_group(group)
    rel = group.between(target, pred.to(target.dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        w, valid = chart_safe_log(group, rel, "mask", what="prediction")
    d = w.norm(dim=-1)
    if valid is not None:
        eye = torch.eye(group.matrix_size, dtype=rel.dtype, device=rel.device)
        d = torch.where(valid, d, (rel - eye).flatten(1).norm(dim=-1))
    return d


def completion_loss(group: Union[str, LieGroup], out: LieAlgebraOutput, g: Tensor, target: Tensor,
                    batch: Tensor, aux_weight: float = 1.0) -> Tensor:
    r"""Invariant training loss for sequence completion.

    ``mean_b ||target_b^{-1} pred_b - I||_F^2`` (defined everywhere, locally the
    squared log-norm) plus ``aux_weight * mean_i ||delta_i - log(g_i^{-1} target)||^2``:
    every token is taught to locate the missing element relative to itself (the
    per-token targets are in the chart by construction of the data). With the pair
    head, also ``aux_weight * mean_b sum_e beta_e ||target^{-1} p_e - I||_F^2`` over
    the pair proposals ``p_e`` and their selection weights ``beta_e``.
    """
    group = get_group(group)
    dtype = out.prediction.dtype
    target = target.to(dtype)
    eye = torch.eye(group.matrix_size, dtype=dtype, device=target.device)
    pooled = (group.between(target, out.prediction) - eye).flatten(1).pow(2).sum(-1).mean()
    if aux_weight == 0:
        return pooled
    with torch.no_grad():
        wt, valid = chart_safe_log(group, group.between(g.to(dtype), target[batch]), "mask",
                                   what="token-to-target pose")
    err = (out.delta - wt).pow(2).sum(-1)
    if valid is not None:
        err = err * valid.to(dtype)
    loss = pooled + aux_weight * err.mean()
    if out.pair_weight is not None:
        # expected pair-proposal error under the selection weights (mixture of experts):
        # sharpens the selection towards pairs whose proposal is right
        pb = batch[out.pair_index[1]]
        perr = (group.between(target[pb], out.pair_g) - eye).flatten(1).pow(2).sum(-1)
        loss = loss + aux_weight * scatter(out.pair_weight * perr, pb, dim=0,
                                           dim_size=target.shape[0], reduce="sum").mean()
    return loss


@torch.no_grad()
def equivariance_error(model: _TokenTransformer, g: Tensor, batch: Optional[Tensor] = None,
                       a: Optional[Tensor] = None, generator: Optional[torch.Generator] = None) -> Tensor:
    r"""``||log((a pred(g))^{-1} pred(a g))||`` per sequence, ``(B,)``, one random ``a`` per sequence.

    Evaluated in the dtype of ``model`` (use ``model.double()`` for float64).
    """
    group = model.group
    dtype = model.token.dtype
    g = g.to(dtype)
    N = g.shape[0]
    if batch is None:
        batch = torch.zeros(N, dtype=torch.long, device=g.device)
    B = int(batch.max()) + 1
    if a is None:
        a = group.random(B, generator=generator, dtype=dtype, device=g.device)
    a = a.to(dtype)
    p1 = model(g, batch=batch).prediction
    p2 = model(group.compose(a[batch], g), batch=batch).prediction
    return pose_error(group, p2, group.compose(a, p1))
