"""Sorting of int64 keys, the step that puts edges in ``(target, source)`` order.

Comparison sorts cost ``O(E log E)`` and dominate graph construction for tens of thousands
of edges. The keys are bounded integers (``target * N + source``), so on CPU (outside ``torch.compile``) both functions use the native
stable radix sort (:func:`pyg_lie.nn._native.radix_sort`, linear time, a few
passes of 8-bit digits). Without the native kernels (no C compiler, or
``PYG_LIE_NATIVE=0``):

* :func:`sort_keys` sorts with numpy at any size, and
* :func:`argsort_keys` sorts the packed keys ``key * E + position`` with numpy
  below :data:`NUMPY_ARGSORT_MAX` keys (unique packed keys make the unstable sort
  a stable argsort), torch's stable sort otherwise.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from . import _checks

__all__ = ["sort_keys", "argsort_keys", "NUMPY_ARGSORT_MAX"]

#: largest key count for which :func:`argsort_keys` uses numpy
NUMPY_ARGSORT_MAX = 1 << 16


def _numpy_ok(key: Tensor) -> bool:
    return key.device.type == "cpu" and key.numel() > 1 and not _checks.tracing()


def _radix(key: Tensor, perm: bool) -> Optional[Tuple[Tensor, Optional[Tensor]]]:
    """The native radix sort's ``(sorted, perm)``, or ``None`` where it does not apply."""
    from .nn import _native  # imported here: pyg_lie.nn imports this module

    if not _numpy_ok(key) or key.dtype != torch.int64 or not _native.available():
        return None
    return _native.radix_sort(key, perm=perm)


def _key(key: Tensor) -> Tensor:
    key = _checks.plain_index("key", key)
    if key.dim() != 1:
        raise ValueError(f"key must be 1-D, got shape {tuple(key.shape)}")
    return key


def sort_keys(key: Tensor) -> Tensor:
    """Ascending copy of the int64 ``key (E,)`` (other integer types are read as int64, PyG's
    ``Index`` as a plain tensor)."""
    key = _key(key)
    r = _radix(key, perm=False)
    if r is not None:
        return r[0]
    if not _numpy_ok(key):
        return torch.sort(key).values
    return torch.from_numpy(np.sort(key.numpy()))


def argsort_keys(key: Tensor) -> Tuple[Tensor, Tensor]:
    """``(sorted key, perm)`` with ``sorted = key[perm]`` for the int64 ``key (E,)``; stable
    (equal keys keep their order)."""
    key = _key(key)
    E = key.numel()
    r = _radix(key, perm=True)
    if r is not None:
        return r
    if (not _numpy_ok(key) or E > NUMPY_ARGSORT_MAX or int(key.min()) < 0
            or int(key.max()) > (2 ** 63 - 1) // E - 1):  # key * E + position must fit in int64
        return torch.sort(key, stable=True)
    packed = np.sort(key.numpy() * E + np.arange(E))
    return torch.from_numpy(packed // E), torch.from_numpy(packed % E)
