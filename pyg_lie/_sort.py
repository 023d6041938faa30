"""Sorting of int64 keys, the step that puts edges in ``(target, source)`` order.

On CPU, ``torch.sort`` of fewer than about 2^16 int64 values takes a slow serial
path: measured on the 2-core CPU (torch 2.14, numpy 1.26, median of 30), 30k keys
sort in 1.22 ms (argsort 1.25 ms) against 0.11 ms for numpy's vectorised
quicksort; above that torch's parallel sort is on par or faster for argsort.
So on CPU (outside ``torch.compile``)

* :func:`sort_keys` sorts with numpy at any size (0.4 vs 0.9 ms at 100k keys,
  26 vs 40 ms at 4M), and
* :func:`argsort_keys` sorts the packed keys ``key * E + position`` with numpy
  below :data:`NUMPY_ARGSORT_MAX` keys (0.18 vs 1.25 ms at 30k; unique packed keys
  make the unstable sort a stable argsort), torch's stable sort otherwise.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
from torch import Tensor

from .groups.base import _is_compiling

__all__ = ["sort_keys", "argsort_keys", "NUMPY_ARGSORT_MAX"]

#: largest key count for which :func:`argsort_keys` uses numpy
NUMPY_ARGSORT_MAX = 1 << 16


def _numpy_ok(key: Tensor) -> bool:
    return key.device.type == "cpu" and key.numel() > 1 and not _is_compiling()


def sort_keys(key: Tensor) -> Tensor:
    """Ascending copy of the int64 ``key (E,)``."""
    if not _numpy_ok(key):
        return torch.sort(key).values
    return torch.from_numpy(np.sort(key.numpy()))


def argsort_keys(key: Tensor) -> Tuple[Tensor, Tensor]:
    """``(sorted key, perm)`` with ``sorted = key[perm]`` for the int64 ``key (E,)``; stable
    (equal keys keep their order)."""
    E = key.numel()
    if (not _numpy_ok(key) or E > NUMPY_ARGSORT_MAX or int(key.min()) < 0
            or int(key.max()) > (2 ** 63 - 1) // E - 1):  # key * E + position must fit in int64
        return torch.sort(key, stable=True)
    packed = np.sort(key.numpy() * E + np.arange(E))
    return torch.from_numpy(packed // E), torch.from_numpy(packed % E)
