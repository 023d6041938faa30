"""Complete graphs: every ordered pair of nodes of the same graph."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import _checks as checks
from .._checks import nonnegative_int
from .._tracing import tracing
from ..ops import complete_edges
from ._search import _empty

def _sorted_batch(batch: Tensor, N: int, name: str = "batch") -> Tensor:
    """``batch`` checked (one graph id >= 0 per node, sorted) as a plain int64 tensor."""
    checks.batch_vector(batch, N, "node")
    batch = checks.plain_index(name, batch)
    if N > 1 and not tracing() and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError(f"{name} must be sorted (PyG convention: the nodes of a graph are contiguous); "
                         f"sort the nodes by {name} first")
    return batch


def complete_graph(batch: Optional[Tensor] = None, self_loops: bool = True, *,
                   num_nodes: Optional[int] = None) -> Tensor:
    r"""Every ordered pair ``j -> i`` of nodes of the same graph, ``(2, sum_b n_b^2)``.

    Args:
        batch: ``(N,)`` sorted graph id of every node (the PyG convention: the nodes of a
            graph are contiguous; ids may skip values), or ``None`` for one graph of
            ``num_nodes`` nodes.
        self_loops: include ``i -> i``.
        num_nodes: the number of nodes when ``batch`` is ``None``.

    Returns:
        ``(2, E)`` int64 on the device of ``batch``, row 0 the source ``j``, row 1 the target
        ``i``, sorted by ``(i, j)`` (the order of :func:`radius_graph`).
    """
    if batch is None:
        if num_nodes is None:
            raise ValueError("complete_graph needs batch (one graph id per node) or num_nodes (one graph)")
        N = nonnegative_int("num_nodes", num_nodes)
        checks.int64_size("the complete graph's edge count (num_nodes^2)", N * N)
        batch = torch.zeros(N, dtype=torch.long)
    else:
        if num_nodes is not None and (not isinstance(batch, Tensor) or batch.numel() != num_nodes):
            raise ValueError(f"num_nodes={num_nodes!r} but batch has "
                             f"{batch.numel() if isinstance(batch, Tensor) else type(batch).__name__} "
                             "entries; pass one of them")
        N = batch.numel() if isinstance(batch, Tensor) else 0
        batch = _sorted_batch(batch, N)
    if not isinstance(self_loops, bool):
        raise ValueError(f"self_loops must be True or False, got {self_loops!r}")
    device = batch.device
    if N == 0:
        return _empty(device)
    counts = torch.unique_consecutive(batch, return_counts=True)[1]
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # first node of every graph, and N
    ei = complete_edges(ptr)
    if not self_loops:
        ei = ei[:, ei[0] != ei[1]]
    return ei
