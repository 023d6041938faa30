r"""Bipartite inputs of the attention layers, as PyG's convolutions take them.

A layer called on a bipartite graph (sources and targets are different node sets, PyG's
``size=(N_src, N_dst)``) takes the node-level inputs as pairs: ``x = (x_src, x_dst)``, the
group elements ``g = (g_src, g_dst)``, the invariants ``(inv_src, inv_dst)``. Row 0 of
``edge_index`` indexes the sources, row 1 the targets; queries come from the targets, keys
and values from the sources, and the output has one row per target. This is what
:func:`torch_geometric.nn.to_hetero` passes for an edge type between two node types.
"""
from __future__ import annotations

from typing import Any, Tuple

import torch
from torch import Tensor

from .. import _checks as checks

__all__ = ["node_pair", "same_form", "bipartite_relative_log", "check_bipartite_edges"]


def node_pair(name: str, value: Any) -> Tuple[Any, Any, bool]:
    """``(source, target, bipartite)`` of a node-level input: a pair ``(src, dst)`` gives its two
    entries and ``True``, anything else ``(value, value, False)``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name} must be a tensor or a pair ({name}_src, {name}_dst) for a bipartite graph, "
                             f"got a {type(value).__name__} of length {len(value)}")
        return value[0], value[1], True
    return value, value, False


def same_form(name: str, value: Any, bipartite: bool) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a pair exactly when ``x`` is (``None``
    is always accepted)."""
    if value is None:
        return
    pair = isinstance(value, (tuple, list))
    if pair != bipartite:
        raise ValueError(f"{name} must be a pair ({name}_src, {name}_dst) when x is a pair (x_src, x_dst), and "
                         f"one tensor when x is one tensor: sources and targets are "
                         f"{'different' if bipartite else 'the same'} nodes; got "
                         f"{'a pair' if pair else type(value).__name__}")


def check_bipartite_edges(edge_index: Tensor, num_src: int, num_dst: int) -> None:
    """``ValueError`` unless row 0 of ``edge_index`` indexes the ``num_src`` sources and row 1 the
    ``num_dst`` targets (one ``aminmax`` per row; left out under ``torch.compile``)."""
    checks.index_range("edge_index[0] (sources)", edge_index[0], num_src, "source")
    checks.index_range("edge_index[1] (targets)", edge_index[1], num_dst, "target")


def bipartite_relative_log(group, g_src: Tensor, g_dst: Tensor, edge_index: Tensor,
                           one_sided_cut: bool = False) -> Tensor:
    """``vee(log(g_dst[i]^-1 g_src[j]))`` ``(E, dim)`` for the edges ``j -> i`` of a bipartite
    graph: the group's own :meth:`~pyg_lie.groups.LieGroup.relative_log` on the concatenated
    node set (sources, then targets), so the numbers are those of the homogeneous layer."""
    n_src = g_src.shape[0]
    shifted = torch.stack([edge_index[0], edge_index[1] + n_src])
    return group.relative_log(torch.cat([g_src, g_dst]), shifted, one_sided_cut=one_sided_cut)
