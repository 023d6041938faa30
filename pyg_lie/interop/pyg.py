r"""PyG's radius search without pyg-lib: :func:`enable_pyg_radius` and :func:`pyg_radius`.

PyG's :func:`torch_geometric.nn.radius_graph`, :func:`torch_geometric.nn.radius` and the
transform :class:`torch_geometric.transforms.RadiusGraph` call the operator
``torch.ops.pyg.radius`` of pyg-lib, which is not on PyPI, and refuse to run while
``torch_geometric.typing.WITH_RADIUS`` is false. Importing pyg_lie changes nothing in PyG;
:func:`enable_pyg_radius` (an explicit call) registers an operator of the same schema,

    pyg::radius(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None, float r=1.0,
                int max_num_neighbors=32, int num_workers=1, bool ignore_same_index=False) -> Tensor

implemented by :mod:`pyg_lie.neighbors`, and sets ``WITH_RADIUS = True``; the context
manager :func:`pyg_radius` does the same for a ``with`` block and restores the previous state
(operator and flag) on exit. It returns
``[target; source]`` (row 0 indexes ``y``, row 1 indexes ``x``) as pyg-lib does, so
PyG's wrappers give their documented results:

* ``radius_graph(pos, r, batch, loop, max_num_neighbors, flow)``: with the default
  ``flow="source_to_target"`` row 0 holds the source ``j``, row 1 the target ``i``; edges
  join points of the same graph with ``|pos_j - pos_i| <= r``; ``loop=False`` drops only
  the pairs ``(i, i)``; every target keeps at most ``max_num_neighbors`` sources (with
  ``loop=True`` its self loop counts as one of them). ``flow="target_to_source"`` swaps
  the rows.
* ``radius(x, y, r, batch_x, batch_y, max_num_neighbors)``: row 0 indexes ``y``, row 1
  ``x``.

Where this operator is more definite than pyg-lib: the edges are sorted by target, then
source; the boundary ``|pos_j - pos_i| = r`` is included, decided in float64 (see
:mod:`pyg_lie.neighbors`); when a target has more than ``max_num_neighbors`` sources
within ``r`` it keeps the nearest ones (ties by the smaller source index), not whichever
the search met first, so the result does not depend on the backend or device.
``num_workers`` is accepted and ignored. ``ptr_x`` / ``ptr_y`` are CSR pointers of
sorted batches, as PyG passes them.

The operator is registered only when no ``pyg::radius`` exists (a real pyg-lib always
wins; pyg-lib is loaded by ``torch_geometric.typing`` before the check) and only once.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional

import torch
from torch import Tensor

__all__ = ["enable_pyg_radius", "pyg_radius", "SCHEMA"]

SCHEMA = ("(Tensor x, Tensor y, Tensor? ptr_x=None, Tensor? ptr_y=None, float r=1.0, "
          "int max_num_neighbors=32, int num_workers=1, bool ignore_same_index=False) -> Tensor")

_OP = None
_LOCK = threading.Lock()


def _ptr_to_batch(ptr: Optional[Tensor], n: int, name: str, points: str) -> Optional[Tensor]:
    if ptr is None:
        return None
    if not isinstance(ptr, Tensor) or ptr.dim() != 1 or ptr.numel() < 1 or ptr.dtype.is_floating_point:
        raise ValueError(f"{name} must be a 1-D integer tensor of graph offsets (a CSR pointer), "
                         f"got {ptr!r}")
    ptr = ptr.to(torch.long)
    counts = ptr.diff()
    if int(ptr[0]) != 0 or int(ptr[-1]) != n or bool((counts < 0).any()):
        raise ValueError(f"{name} must rise from 0 to the number of {points} ({n}), got {ptr.tolist()}; "
                         "pass a sorted batch vector to PyG's radius functions")
    return torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), counts).to(
        torch.long)


def _truncate(edges: Tensor, x: Tensor, y: Tensor, k: int) -> Tensor:
    """Keep each target's ``k`` nearest sources (ties by smaller source); ``edges`` is
    ``[source; target]`` sorted by ``(target, source)`` and stays in that order."""
    if edges.size(1) == 0:
        return edges
    src, tgt = edges
    d2 = (x[src].double() - y[tgt].double()).pow(2).sum(-1)
    order = torch.sort(d2, stable=True).indices
    order = order[torch.sort(tgt[order], stable=True).indices]
    counts = torch.bincount(tgt, minlength=y.size(0))
    start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=edges.device) - start[tgt[order]]
    keep = torch.zeros(src.numel(), dtype=torch.bool, device=edges.device)
    keep[order[rank < k]] = True
    return edges[:, keep]


def _radius(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None,
            r: float = 1.0, max_num_neighbors: int = 32, num_workers: int = 1,
            ignore_same_index: bool = False) -> Tensor:
    from .. import neighbors

    if max_num_neighbors < 0:
        raise ValueError(f"max_num_neighbors must be >= 0, got {max_num_neighbors}")
    batch_x = _ptr_to_batch(ptr_x, x.size(0), "ptr_x", "points in x")
    batch_y = _ptr_to_batch(ptr_y, y.size(0), "ptr_y", "points in y")
    same_batch = (batch_x is None and batch_y is None) or (
        batch_x is not None and batch_y is not None and torch.equal(batch_x, batch_y))
    if ignore_same_index and same_batch and x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y):
        edges = neighbors.radius_graph(x, r, batch_x, loop=False, max_num_neighbors=max_num_neighbors)
    elif not ignore_same_index:
        edges = neighbors.radius(x, y, r, batch_x, batch_y, max_num_neighbors=max_num_neighbors)
    else:  # drop i == j before truncating, so each target still gets up to k others
        edges = neighbors.radius(x, y, r, batch_x, batch_y)
        edges = _truncate(edges[:, edges[0] != edges[1]], x, y, max_num_neighbors)
    return edges.flip(0).contiguous()


def _radius_fake(x, y, ptr_x=None, ptr_y=None, r=1.0, max_num_neighbors=32, num_workers=1,
                 ignore_same_index=False):
    num_edges = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty((2, num_edges), dtype=torch.long)


def _pyg_radius_exists() -> bool:
    try:
        torch.ops.pyg.radius  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def enable_pyg_radius() -> bool:
    """Make PyG's radius search (``radius_graph``, ``radius``, ``T.RadiusGraph``) work without
    pyg-lib, through :mod:`pyg_lie.neighbors` (see the module docstring for the semantics),
    until the end of the process.

    ``import pyg_lie`` and its submodules never do this; call it once before using PyG's radius
    search, or use :func:`pyg_radius` for a ``with`` block. :func:`pyg_lie.graphgym.lift_transform`
    calls it when its config asks for a radius graph. Idempotent; does nothing when pyg-lib
    provides ``pyg::radius``.

    Returns:
        ``True`` when this operator serves PyG's radius search (now or from an earlier
        call), ``False`` when another ``pyg::radius`` (pyg-lib's) is in place.
    """
    global _OP
    import torch_geometric.typing as pyg_typing  # loads pyg-lib first where it is installed

    with _LOCK:
        if _OP is None:
            if _pyg_radius_exists():
                return False
            op = torch.library.custom_op("pyg::radius", _radius, mutates_args=(), schema=SCHEMA)
            op.register_fake(_radius_fake)
            _OP = op
        pyg_typing.WITH_RADIUS = True
    return True


def _disable() -> None:
    """Unregister this module's ``pyg::radius`` (never pyg-lib's); the caller restores the flag."""
    global _OP
    if _OP is not None:
        from torch._library import custom_ops

        lib = custom_ops.OPDEF_TO_LIB.pop("pyg::radius", None) or _OP._lib
        lib._destroy()  # also drops the cached torch.ops.pyg.radius
        _OP = None


@contextlib.contextmanager
def pyg_radius() -> Iterator[bool]:
    """:func:`enable_pyg_radius` for a ``with`` block; on exit ``WITH_RADIUS`` gets its previous
    value back and the operator is unregistered unless it was registered before the block.

    Yields:
        what :func:`enable_pyg_radius` returned.

    Example::

        import torch, torch_geometric.transforms as T
        from torch_geometric.data import Data
        from pyg_lie import pyg_radius

        with pyg_radius():
            data = T.RadiusGraph(0.5)(Data(pos=torch.rand(100, 3)))
    """
    import torch_geometric.typing as pyg_typing

    with _LOCK:
        flag, ours_before = pyg_typing.WITH_RADIUS, _OP is not None
    try:
        yield enable_pyg_radius()
    finally:
        with _LOCK:
            if not ours_before:
                _disable()
            pyg_typing.WITH_RADIUS = flag
