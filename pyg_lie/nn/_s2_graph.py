"""The neighbour search of the S^2 attention layers, apart from their attention step
(:mod:`pyg_lie.nn._s2_kernels`), which builds no graph.

* :func:`geodesic_neighbors` -- geodesic-radius neighbourhoods on the unit sphere by
  :func:`pyg_lie.neighbors.geodesic_radius`, sorted by target then source.
* ``_geodesic_radius_bruteforce`` -- a chunked float64 brute force with the same contract
  (pairs with geodesic distance ``<= theta``, compared through the chord
  ``|x - y| <= 2 sin(theta / 2)``), the tests' reference.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..ops import argsort_keys
from ..neighbors import geodesic_radius

__all__ = ["geodesic_neighbors"]


def _geodesic_radius_bruteforce(x: Tensor, y: Tensor, theta: float, chunk: int = 1024) -> Tensor:
    """All pairs ``(j, i)`` with ``d(x_j, y_i) <= theta`` on the unit sphere (float64 chord test).

    Args:
        x: ``(Nx, 3)`` source points (unit vectors).
        y: ``(Ny, 3)`` target points (unit vectors).
        theta: geodesic radius in radians.

    Returns:
        ``(2, E)`` int64, row 0 sources, row 1 targets, sorted by target then source.
    """
    x64 = x.detach().to(torch.float64)
    y64 = y.detach().to(torch.float64)
    if theta >= math.pi:
        r2 = 4.0 + 1.0  # every pair
    else:
        r2 = (2.0 * math.sin(0.5 * theta)) ** 2
    rows, cols = [], []
    for start in range(0, y64.shape[0], chunk):
        yc = y64[start : start + chunk]
        d2 = (yc[:, None, :] - x64[None, :, :]).pow(2).sum(-1)  # (c, Nx)
        ti, sj = torch.nonzero(d2 <= r2, as_tuple=True)  # row-major: sorted by target then source
        rows.append(sj)
        cols.append(ti + start)
    if not rows:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    return torch.stack([torch.cat(rows), torch.cat(cols)], 0).to(x.device)


def geodesic_neighbors(x: Tensor, y: Tensor, theta: float) -> Tensor:
    """Geodesic-radius neighbourhoods on the unit sphere.

    :func:`pyg_lie.neighbors.geodesic_radius` in float64 with ``max_num_neighbors=None``
    (no truncation), edges sorted by target then source.

    Args:
        x: ``(Nx, 3)`` source points on S^2.
        y: ``(Ny, 3)`` target points on S^2.
        theta: radius in radians (already including any widening factor).

    Returns:
        ``(2, E)`` edge index ``[source; target]``.
    """
    ei = geodesic_radius(x.to(torch.float64), y.to(torch.float64), theta, max_num_neighbors=None)
    return _sort_by_target(ei, x.shape[0])


def _sort_by_target(edge_index: Tensor, num_src: int) -> Tensor:
    key = edge_index[1].to(torch.int64) * max(int(num_src), 1) + edge_index[0].to(torch.int64)
    perm = argsort_keys(key)[1]
    return edge_index[:, perm].to(torch.long)
