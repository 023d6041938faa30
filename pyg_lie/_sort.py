"""Sorting of int64 keys, the step that puts edges in ``(target, source)`` order.

Comparison sorts cost ``O(E log E)`` and dominate graph construction for tens of thousands of
edges. The keys are bounded integers (``target * N + source``): both functions are the
operator :func:`pyg_lie.ops.sort_keys` / :func:`pyg_lie.ops.argsort_keys`, a stable radix
sort (linear time) on CPU, numpy's or torch's sorts elsewhere.
"""
from __future__ import annotations

from .ops.graph import NUMPY_ARGSORT_MAX, argsort_keys, sort_keys

__all__ = ["sort_keys", "argsort_keys", "NUMPY_ARGSORT_MAX"]
