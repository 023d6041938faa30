"""Argument checks shared by the layers and models (constructor arguments, and the tensors
every message-passing layer takes), so that one mistake reads the same everywhere: a
``ValueError`` naming the argument, what it must be, and the value."""
from __future__ import annotations

import math
import operator
from typing import Any, Optional

import torch
from torch import Tensor


def positive_int(name: str, value: Any) -> int:
    """``value`` as an ``int >= 1`` (numpy and torch integers included, bools not)."""
    return _int(name, value, 1, "a positive int")


def nonnegative_int(name: str, value: Any) -> int:
    """``value`` as an ``int >= 0``."""
    return _int(name, value, 0, "an int >= 0")


def _int(name: str, value: Any, low: int, what: str) -> int:
    try:
        v = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        v = None
    if v is None or v < low:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return v


def _float(value: Any) -> float:
    """``float(value)``, NaN (which every check rejects) where it has none."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def positive_float(name: str, value: Any, hint: str = "") -> float:
    """``value`` as a finite float ``> 0``; ``hint`` ends the message."""
    v = _float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0{hint}, got {value!r}")
    return v


def nonnegative_float(name: str, value: Any, hint: str = "") -> float:
    """``value`` as a finite float ``>= 0``; ``hint`` ends the message."""
    v = _float(value)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0{hint}, got {value!r}")
    return v


def finite_float(name: str, value: Any, hint: str = "") -> float:
    """``value`` as a finite float; ``hint`` ends the message."""
    v = _float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number{hint}, got {value!r}")
    return v


def optional_length(name: str, value: Any, none_means: str) -> Optional[float]:
    """``None``, or ``value`` as a finite float ``>= 0`` (a radius, a threshold)."""
    return None if value is None else nonnegative_float(name, value, f", or None for {none_means}")


def probability(name: str, value: Any) -> float:
    """``value`` as a float in ``[0, 1)`` (a dropout rate)."""
    v = _float(value)
    if not 0.0 <= v < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return v


def edge_index(value: Any) -> None:
    """``value`` must be an integer ``(2, E)`` tensor (row 0 sources, row 1 targets): float
    indices would be truncated without a word."""
    if not isinstance(value, Tensor) or value.dim() != 2 or value.size(0) != 2:
        got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"edge_index must have shape (2, E), got {got}")
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise ValueError(f"edge_index must hold integer node indices, got {value.dtype}; use edge_index.long()")


def batch_vector(batch: Any, num_nodes: int, per: str = "node") -> None:
    """``batch`` must hold one graph id ``>= 0`` per node, as integers: ``(num_nodes,)``. The
    sign check reads the tensor (a device sync), so it is left out under ``torch.compile``."""
    if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.numel() != num_nodes:
        got = tuple(batch.shape) if isinstance(batch, Tensor) else type(batch).__name__
        raise ValueError(f"batch must be a 1-D tensor with one graph id per {per} ({num_nodes}), got {got}")
    if batch.is_floating_point() or batch.is_complex() or batch.dtype == torch.bool:
        raise ValueError(f"batch must hold integer graph ids, got {batch.dtype}; use batch.long()")
    if num_nodes and not torch.compiler.is_compiling() and int(batch.min()) < 0:
        raise ValueError(f"batch must hold graph ids >= 0, got {int(batch.min())}")


def group_elements(group: Any, g: Any, num_nodes: int) -> None:
    """``g`` must hold one matrix of ``group`` per node: ``(num_nodes, m, m)``."""
    m = group.matrix_size
    if not isinstance(g, Tensor) or g.dim() != 3 or tuple(g.shape) != (num_nodes, m, m):
        got = tuple(g.shape) if isinstance(g, Tensor) else type(g).__name__
        raise ValueError(f"g must hold one {group.name} element per node, shape ({num_nodes}, {m}, {m}), "
                         f"got {got}")


def floating(name: str, value: Tensor, like: Optional[Tensor] = None) -> None:
    """``value`` must be a floating-point tensor, of the dtype of the parameter ``like``
    where given (unless autocast is on, which converts on its own)."""
    if not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {value.dtype}; use {name}.float()")
    if like is not None and value.dtype != like.dtype and not torch.is_autocast_enabled(value.device.type):
        raise ValueError(f"{name} is {value.dtype} but the model's parameters are {like.dtype}; pass "
                         f"{name}.to({like.dtype}) or convert the model (model.to({value.dtype}))")


def plain_edge_index(value: Any) -> Any:
    """``value`` as a plain :class:`torch.Tensor` when it is a tensor subclass such as PyG's
    ``EdgeIndex`` or ``Index`` (whose ``data_ptr()`` is 0, so no kernel may see them), else
    ``value`` unchanged for :func:`edge_index` to check."""
    if isinstance(value, Tensor) and type(value) is not Tensor:
        as_tensor = getattr(value, "as_tensor", None)
        return as_tensor() if callable(as_tensor) else value.as_subclass(Tensor).clone(
            memory_format=torch.contiguous_format).as_subclass(Tensor)
    return value
