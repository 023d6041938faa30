"""Argument checks shared by the layers and models (constructor arguments, and the tensors
every message-passing layer takes), so that one mistake reads the same everywhere: a
``ValueError`` naming the argument, what it must be, and the value."""
from __future__ import annotations

import math
import operator
from typing import Any, Optional

import torch
from torch import Tensor

from ._tracing import compiling, tracing  # noqa: F401  (tracing: the name callers import from here)


def positive_int(name: str, value: Any) -> int:
    """``value`` as an ``int >= 1`` (numpy and torch integers included, bools not)."""
    return _int(name, value, 1, "a positive int")


def nonnegative_int(name: str, value: Any) -> int:
    """``value`` as an ``int >= 0``."""
    return _int(name, value, 0, "an int >= 0")


#: the largest size (a width, a count of layers, heads, classes or samples) that the size
#: checks take: beyond it the tensors it shapes exceed any memory (and torch's size arithmetic)
MAX_SIZE = 1 << 20


def size(name: str, value: Any, low: int = 1, high: int = MAX_SIZE) -> int:
    """``value`` as an int in ``[low, high]`` (a width or a count that shapes tensors or loops):
    a ``ValueError`` naming ``name`` instead of an overflow deep in torch, a MemoryError or a
    loop that never ends."""
    v = _int(name, value, low, f"an int >= {low}" if low else "an int >= 0")
    if v > high:
        raise ValueError(f"{name} must be at most {high} (larger sizes exceed any memory), got {value!r}")
    return v


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


def graph_ids(name: str, batch: Any, num_nodes: int, per: str = "node") -> None:
    """``batch`` must be a 1-D integer tensor with one graph id per node, ``(num_nodes,)``; the
    ids are not read (:func:`batch_vector` moreover wants them ``>= 0``)."""
    if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.numel() != num_nodes:
        got = tuple(batch.shape) if isinstance(batch, Tensor) else type(batch).__name__
        raise ValueError(f"{name} must be a 1-D tensor with one graph id per {per} ({num_nodes}), got {got}")
    if batch.is_floating_point() or batch.is_complex() or batch.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer graph ids, got {batch.dtype}; use {name}.long()")


def batch_vector(batch: Any, num_nodes: int, per: str = "node", num_graphs: Optional[int] = None) -> None:
    """``batch`` must hold one graph id ``>= 0`` per node, as integers: ``(num_nodes,)``, and with
    ``num_graphs`` ids below it. The value checks read the tensor (one device sync), so they
    are left out under ``torch.compile``."""
    graph_ids("batch", batch, num_nodes, per)
    if num_nodes and not compiling():
        lo, hi = (int(v) for v in torch.aminmax(batch))
        if lo < 0:
            raise ValueError(f"batch must hold graph ids >= 0, got {lo}")
        if num_graphs is not None and hi >= num_graphs:
            raise ValueError(f"num_graphs={num_graphs} but batch holds graph id {hi}; pass num_graphs >= {hi + 1} "
                             f"(or leave it out: batch.max() + 1)")


def group_elements(group: Any, g: Any, num_nodes: int, members: bool = False) -> None:
    """``g`` must hold one matrix of ``group`` per node: ``(num_nodes, m, m)``; with ``members``
    every matrix must moreover be an element of the group (:meth:`LieGroup.contains`: one pass
    over ``g`` and one device sync, left out while tracing)."""
    m = group.matrix_size
    if not isinstance(g, Tensor) or g.dim() != 3 or tuple(g.shape) != (num_nodes, m, m):
        got = tuple(g.shape) if isinstance(g, Tensor) else type(g).__name__
        raise ValueError(f"g must hold one {group.name} element per node, shape ({num_nodes}, {m}, {m}), "
                         f"got {got}")
    if members and num_nodes and g.is_floating_point() and _reads_values(g):
        bad = ~group.contains(g.detach())
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"g[{i}] (and {int(bad.sum()) - 1} more) is no {group.name} element; build the "
                             f"elements with the group (e.g. {group.name}().section(pos), .exp(xi), .random(N) "
                             f"or a Lift)")


def floating(name: str, value: Tensor, like: Optional[Tensor] = None) -> None:
    """``value`` must be a floating-point tensor, of the dtype of the parameter ``like``
    where given (unless autocast is on, which converts on its own)."""
    if not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {value.dtype}; use {name}.float()")
    if like is not None and value.dtype != like.dtype and not torch.is_autocast_enabled(value.device.type):
        raise ValueError(f"{name} is {value.dtype} but the model's parameters are {like.dtype}; pass "
                         f"{name}.to({like.dtype}) or convert the model (model.to({value.dtype}))")


def node_features(name: str, x, channels: int, like: Optional[Tensor] = None) -> None:
    """``x`` must be a floating-point ``(N, channels)`` tensor (of the dtype of the parameter
    ``like`` where given; see :func:`floating`)."""
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[-1] != channels:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must have shape (N, {channels}), got {got}")
    floating(name, x, like)


def _reads_values(t: Tensor) -> bool:
    """False where a value check cannot or must not read ``t``: under ``torch.compile``, for
    meta and fake tensors and under a fake mode (tracing, ``torch.export``, ``FakeTensorMode``)."""
    if t.device.type == "meta" or tracing():
        return False
    from torch._C._functorch import is_batchedtensor
    from torch._subclasses.fake_tensor import is_fake

    return not (is_fake(t) or is_batchedtensor(t))


def plain_index(name: str, t: Any) -> Tensor:
    """``t`` as a plain ``torch.Tensor`` of int64: integer tensors of narrower types are widened
    (keys such as ``dst * N + src`` would overflow in them), and subclasses such as PyG's
    ``EdgeIndex`` and ``Index`` are copied into a fresh tensor (their ``data_ptr()`` can be 0,
    and they stay subclasses through ``to()`` / ``contiguous()``). Float, complex and bool
    tensors raise ``ValueError`` naming ``name``."""
    if not isinstance(t, Tensor):
        raise ValueError(f"{name} must be an integer tensor, got {type(t).__name__}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer indices, got {t.dtype}; use {name}.long()")
    if type(t) is not Tensor and not compiling():  # traced tensors are never copied
        return torch.empty(t.shape, dtype=torch.int64, device=t.device).copy_(t)
    return t if t.dtype == torch.int64 else t.to(torch.int64)


def index_range(name: str, t: Tensor, size: int, what: str = "node") -> None:
    """``ValueError`` naming ``name`` unless every entry of ``t`` lies in ``[0, size)``: one
    ``aminmax`` (one device sync), left out under ``torch.compile`` and for fake tensors.
    Negative indices are errors, never counted from the end."""
    if not _reads_values(t) or t.numel() == 0:
        return
    lo, hi = torch.aminmax(t.detach()) if t.dim() else (t, t)
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi >= size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} holds {what} index {bad}, outside [0, {size}) for {size} {what}s; indices "
                         f"must be >= 0 and < {size} (negative indices are not counted from the end)")


def index_tensor(name: str, t: Any, size: Optional[int] = None, what: str = "node",
                 validate: bool = True) -> Tensor:
    """:func:`plain_index` of ``t``, then with ``size`` and ``validate`` the range check of
    :func:`index_range`. Returns the plain int64 tensor."""
    t = plain_index(name, t)
    if size is not None and validate:
        index_range(name, t, size, what)
    return t


def pointer(name: str, ptr: Any, num_items: int, num_segments: Optional[int] = None,
            validate: bool = True) -> Tensor:
    """``ptr`` as a plain int64 CSR pointer: 1-D with ``num_segments + 1`` entries (where
    given), and with ``validate`` (one pass and one device sync; left out under
    ``torch.compile`` and for fake tensors) ``ptr[0] = 0``, ``ptr[-1] = num_items``,
    non-decreasing. ``ValueError`` naming ``name`` otherwise."""
    ptr = plain_index(name, ptr)
    if compiling():
        return ptr
    want = "" if num_segments is None else f" ({num_segments + 1},)"
    if ptr.dim() != 1 or ptr.numel() < 1 or (num_segments is not None and ptr.numel() != num_segments + 1):
        raise ValueError(f"{name} must be a 1-D CSR pointer{want}, got shape {tuple(ptr.shape)}")
    if validate:
        pointer_values(name, ptr, num_items)
    return ptr


def pointer_values(name: str, ptr: Tensor, num_items: int) -> None:
    """``ValueError`` naming ``name`` unless the 1-D integer tensor ``ptr`` is a CSR pointer of
    ``num_items`` items: ``ptr[0] = 0``, ``ptr[-1] = num_items``, non-decreasing (so every entry
    lies in ``[0, num_items]``). One vectorised pass and one device sync; left out under
    ``torch.compile`` and for fake tensors."""
    if not _reads_values(ptr) or ptr.numel() == 0:
        return
    p = ptr.detach()
    if p.device.type == "cpu" and type(p) is Tensor:  # numpy on the same memory: a few microseconds
        a = p.numpy()
        first, last, decreasing = int(a[0]), int(a[-1]), bool(a.size > 1 and (a[1:] < a[:-1]).any())
    else:
        steps = (p[1:] < p[:-1]).any() if p.numel() > 1 else torch.zeros((), dtype=torch.bool, device=p.device)
        first, last, decreasing = torch.stack([p[0].long(), p[-1].long(), steps.long()]).tolist()
    if first != 0 or last != num_items:
        raise ValueError(f"{name} must run from 0 to the number of items ({num_items}), got {first} .. {last}")
    if decreasing:
        raise ValueError(f"{name} must be non-decreasing (a CSR pointer of sorted items)")


#: the largest count an int64 holds
INT64_MAX = 2 ** 63 - 1


def int64_size(name: str, value: int, hint: str = "") -> int:
    """``value``, an exact Python ``int`` size computed from the inputs (an edge count, a largest
    output index), if an int64 holds it; ``ValueError`` naming ``name`` otherwise: a kernel
    computing it in int64 would wrap around and write past its buffer. ``hint`` ends the message."""
    value = int(value)
    if not 0 <= value <= INT64_MAX:
        raise ValueError(f"{name} would be {value}, outside what an int64 holds ([0, 2^63 - 1]){hint}")
    return value


def edge_features(name: str, value: Any, num_edges: int, width: int, hint: str = "") -> None:
    """``value`` must be a floating-point ``(num_edges, width)`` tensor, one row per edge (a
    precomputed ``rel_log``: ``(E, group.dim)``); ``hint`` ends the message."""
    if (not isinstance(value, Tensor) or value.dim() != 2 or tuple(value.shape) != (num_edges, width)
            or not value.is_floating_point()):
        got = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"{name} must be a floating-point tensor of shape ({num_edges}, {width}), one row per "
                         f"edge, got {got}{hint}")
