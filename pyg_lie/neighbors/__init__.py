"""Graphs: radius neighbourhoods (Euclidean, geodesic on S^2), complete graphs and log-metric
graphs of group elements.

* :func:`radius_graph`, :func:`radius`, :func:`geodesic_radius_graph`, :func:`geodesic_radius`:
  radius neighbourhoods of points (the rest of this docstring).
* :func:`complete_graph`: every ordered pair of nodes of the same graph.
* :func:`knn_graph`: the ``k`` nearest points of every point, by the same float64 rule.
* :func:`log_knn_graph`, :func:`log_radius_graph`: k nearest neighbours and radius graphs of
  group elements in the invariant metric ``||log(g_i^{-1} g_j)||``.

All functions return a PyG-style ``edge_index`` of shape ``(2, E)`` (int64, on
the device of the input points): row 0 holds the *source* ``j`` (a neighbour),
row 1 the *target* ``i`` (the query point), sorted by ``(i, j)``.

Exact, backend-independent decision
-----------------------------------
Every backend only produces a *candidate superset* (searched with a radius
enlarged by a few ulps). The final decision is taken once, in a shared step,
in float64 on the input coordinates::

    keep (j, i)  iff  sum_k (float64(pos_j[k]) - float64(pos_i[k]))**2 <= float64(r)**2

so the boundary is inclusive and all backends return the identical edge set,
for float32 and float64 inputs alike (with integer coordinates the decision is
exact). The geodesic functions use the chord radius ``2 sin(theta / 2)``
(computed in float64) in the same rule; ``theta >= pi`` returns all pairs.

Truncation
----------
``max_num_neighbors=None`` (the default) never truncates (torch-cluster's
default of 32 is not used). With ``max_num_neighbors=k`` every target keeps its
``k`` nearest sources, ties in the float64 squared distance broken by the
smaller source index; the result is the same for every backend. With
``loop=True`` the self loop counts as one of the ``k``.

Backends
--------
* ``"kdtree"``: :class:`scipy.spatial.cKDTree` (CPU only). One tree per large
  graph; consecutive small graphs (up to ``KDTREE_GROUP`` points together)
  share a tree in which the graph id times a separation larger than the
  radius is an extra coordinate, so graphs never connect and batches of many
  small molecules do not loop in Python per graph. ``query_pairs`` for
  ``radius_graph``, ``sparse_distance_matrix`` for the bipartite ``radius``
  (both return all pairs in one call, where ``query_ball_point`` returns Python lists).
* ``"torch_cluster"``: :func:`torch_cluster.radius` (CPU and CUDA), imported
  lazily. It truncates silently, so it is called with a bound and the targets
  whose count reached the bound are searched again with a larger one.
* ``"cdist"``: chunked :func:`torch.cdist`, no extra dependency, any device;
  ``O(N_x N_y)`` work per graph, memory bounded by ``chunk_elements``.
* ``"auto"``: on CPU ``"kdtree"`` (if scipy imports; else ``"torch_cluster"``
  if installed; else ``"cdist"``); on CUDA ``"torch_cluster"`` if installed,
  else ``"cdist"``; on other devices ``"cdist"``. The CPU rule follows
  ``pyg-lie bench neighbors`` (``docs/neighbors.md``), which times the backends on the
  machine at hand.
  Before any of these, :func:`radius_graph` with ``"auto"`` on CPU, points in 1
  to 3 dimensions, a sorted (or no) ``batch`` and no truncation runs the native
  cell lists of ``_native/radius_graph.c``: one pass, the same float64 rule
  (products and sums rounded one by one, as in the shared step), the edges
  already in order (no tree to build and no sort of the edges; ``pyg-lie bench neighbors``
  compares it with the k-d tree).

Batches need not be sorted and graph ids may be any integers.

Modules: ``_search`` (backends, argument checks, the shared search and decision step),
``radius_graphs`` (radius and geodesic radius graphs), ``knn`` (k nearest neighbours),
``complete`` (complete graphs), ``log_metric`` (log-metric graphs of group elements).
"""
from __future__ import annotations

from ._search import (BACKENDS, CDIST_CHUNK_ELEMENTS, CDIST_GROUP_ELEMENTS, KDTREE_GROUP,  # noqa: F401
                      available_backends, resolve_backend)
from .complete import _sorted_batch, complete_graph  # noqa: F401
from .knn import knn_graph
from .log_metric import (AUTO_EMBEDDING_MIN, AUTO_EMBEDDING_MIN_OTHER, GRAPH_METHODS,  # noqa: F401
                         log_knn_graph, log_radius_graph)
from .radius_graphs import chord_radius, geodesic_radius, geodesic_radius_graph, radius, radius_graph  # noqa: F401

__all__ = [
    "radius_graph",
    "radius",
    "geodesic_radius_graph",
    "geodesic_radius",
    "complete_graph",
    "knn_graph",
    "log_knn_graph",
    "log_radius_graph",
    "GRAPH_METHODS",
    "resolve_backend",
    "available_backends",
    "BACKENDS",
]
