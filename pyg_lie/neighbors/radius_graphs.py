"""Radius graphs in R^d and geodesic radius graphs on the unit sphere (the decision rule,
truncation and backends: :mod:`pyg_lie.neighbors`)."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .._tracing import tracing
from ..ops import native_available
from ..ops import radius_graph as radius_graph_op
from ._search import (_check_batch, _check_k, _check_points, _check_scalar, _check_unit, _group_ptr, _search,
                      _sorted_ranks, resolve_backend)

def radius_graph(pos: Tensor, r: float, batch: Optional[Tensor] = None, loop: bool = False,
                 max_num_neighbors: Optional[int] = None, backend: str = "auto") -> Tensor:
    """All pairs ``(j, i)`` of points of the same graph with ``|pos_j - pos_i| <= r``.

    Args:
        pos: points ``(N, d)``, floating point, finite.
        r: radius, finite and ``>= 0``; the boundary is inclusive (decided in float64).
        batch: graph id per point ``(N,)``, any integers, need not be sorted;
            ``None`` means one graph.
        loop: include the self pairs ``(i, i)``. With ``loop=False`` only the
            index pair ``i == j`` is dropped; duplicate points still connect.
        max_num_neighbors: ``None`` for no truncation; else each target keeps
            its ``k`` nearest sources (ties by smaller source index).
        backend: ``"auto"``, ``"kdtree"``, ``"torch_cluster"`` or ``"cdist"``
            (see the module docstring for the ``"auto"`` rule).

    Returns:
        ``edge_index`` ``(2, E)`` int64 on ``pos.device``: row 0 source ``j``,
        row 1 target ``i``, sorted by ``(i, j)``.
    """
    _check_points(pos, "pos")
    r = _check_scalar(r, "r")
    batch = _check_batch(batch, pos.size(0), pos.device, "batch", "pos")
    k = _check_k(max_num_neighbors)
    if backend == "auto" and k is None:
        out = _native_radius_graph(pos, r, batch, bool(loop))
        if out is not None:
            return out
    be = resolve_backend(backend, pos.device)
    return _search(pos, pos, r, batch, batch, True, bool(loop), k, be, all_pairs=False)


def _native_radius_graph(pos: Tensor, r: float, batch: Optional[Tensor], loop: bool) -> Optional[Tensor]:
    """:func:`radius_graph` by the ``radius_graph`` operator of :mod:`pyg_lie.ops` (the native
    cell lists of ``_native/radius_graph.c``) where they apply: CPU with the native kernels
    built, 1 to 3 dimensions, ``batch`` sorted or ``None``, outside ``torch.compile``; else
    ``None`` (the k-d tree and the other backends then search)."""
    n, d = pos.shape
    if pos.device.type != "cpu" or not 1 <= d <= 3 or n == 0 or tracing() or not native_available():
        return None
    if batch is None:
        ptr = torch.tensor([0, n])
    else:
        if bool((batch[1:] < batch[:-1]).any()):
            return None
        ranks = _sorted_ranks(batch)
        ptr = _group_ptr(ranks, int(ranks[-1]) + 1)
    return radius_graph_op(pos, ptr, r, loop)


def radius(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor] = None,
           batch_y: Optional[Tensor] = None, max_num_neighbors: Optional[int] = None,
           backend: str = "auto") -> Tensor:
    """Bipartite search: pairs ``(j, i)`` with ``|x_j - y_i| <= r`` and ``batch_x[j] == batch_y[i]``.

    Args:
        x: sources ``(N_x, d)``.
        y: targets ``(N_y, d)``, same ``d`` and device as ``x``.
        r: radius, finite and ``>= 0``, inclusive (decided in float64).
        batch_x: graph id per source ``(N_x,)`` or ``None`` (all graph 0).
        batch_y: graph id per target ``(N_y,)`` or ``None`` (all graph 0).
        max_num_neighbors: ``None`` for no truncation; else the ``k`` nearest
            sources per target (ties by smaller source index).
        backend: see :func:`radius_graph`.

    Returns:
        ``(2, E)`` int64: row 0 indexes ``x``, row 1 indexes ``y``, sorted by ``(i, j)``.
    """
    _check_points(x, "x")
    _check_points(y, "y")
    if y.size(1) != x.size(1):
        raise ValueError(f"y must have as many columns as x ({x.size(1)}), got shape {tuple(y.shape)}")
    if y.device != x.device:
        raise ValueError(f"y is on {y.device} but x is on {x.device}; move both to one device")
    r = _check_scalar(r, "r")
    batch_x = _check_batch(batch_x, x.size(0), x.device, "batch_x", "x")
    batch_y = _check_batch(batch_y, y.size(0), x.device, "batch_y", "y")
    k = _check_k(max_num_neighbors)
    be = resolve_backend(backend, x.device)
    dt = torch.promote_types(x.dtype, y.dtype)
    return _search(x.to(dt), y.to(dt), r, batch_x, batch_y, False, True, k, be, all_pairs=False)


def chord_radius(theta: float) -> float:
    """Chord length ``2 sin(theta / 2)`` of the geodesic distance ``theta`` on the unit sphere."""
    return 2.0 * math.sin(min(theta, math.pi) / 2.0)


def geodesic_radius_graph(pos: Tensor, theta: float, batch: Optional[Tensor] = None,
                          loop: bool = False, max_num_neighbors: Optional[int] = None,
                          backend: str = "auto") -> Tensor:
    """:func:`radius_graph` for unit vectors ``pos (N, 3)`` with geodesic distance ``<= theta``.

    Implemented as the chord radius ``2 sin(theta / 2)`` (float64, inclusive);
    ``theta >= pi`` returns every pair of the same graph. Truncation ranks by
    chord (equivalently geodesic) distance.

    Returns:
        ``(2, E)`` int64, row 0 source ``j``, row 1 target ``i``, sorted by ``(i, j)``.
    """
    _check_points(pos, "pos", dim=3)
    _check_unit(pos, "pos")
    theta = _check_scalar(theta, "theta")
    batch = _check_batch(batch, pos.size(0), pos.device, "batch", "pos")
    k = _check_k(max_num_neighbors)
    be = resolve_backend(backend, pos.device)
    return _search(pos, pos, chord_radius(theta), batch, batch, True, bool(loop), k, be,
                   all_pairs=theta >= math.pi)


def geodesic_radius(x: Tensor, y: Tensor, theta: float, batch_x: Optional[Tensor] = None,
                    batch_y: Optional[Tensor] = None, max_num_neighbors: Optional[int] = None,
                    backend: str = "auto") -> Tensor:
    """:func:`radius` for unit vectors ``x (N_x, 3)``, ``y (N_y, 3)`` with geodesic distance ``<= theta``.

    Used by the S^2 attention with ``theta = (1 + 1e-3) * theta_cutoff`` to
    match torch-harmonics. ``theta >= pi`` returns every pair of the same graph.

    Returns:
        ``(2, E)`` int64: row 0 indexes ``x``, row 1 indexes ``y``, sorted by ``(i, j)``.
    """
    _check_points(x, "x", dim=3)
    _check_points(y, "y", dim=3)
    if y.device != x.device:
        raise ValueError(f"y is on {y.device} but x is on {x.device}; move both to one device")
    _check_unit(x, "x")
    _check_unit(y, "y")
    theta = _check_scalar(theta, "theta")
    batch_x = _check_batch(batch_x, x.size(0), x.device, "batch_x", "x")
    batch_y = _check_batch(batch_y, y.size(0), x.device, "batch_y", "y")
    k = _check_k(max_num_neighbors)
    be = resolve_backend(backend, x.device)
    dt = torch.promote_types(x.dtype, y.dtype)
    return _search(x.to(dt), y.to(dt), chord_radius(theta), batch_x, batch_y, False, True, k, be,
                   all_pairs=theta >= math.pi)
