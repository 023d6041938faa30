r"""Graph construction: key sorts, CSR patterns, lifted and complete edge lists, radius graphs.

Every function is one operator (``torch.ops.pyg_lie.<name>``) on int64 indices. On CPU the
native C kernels run (a linear-time radix sort, one-pass CSR scans, cell lists for radius
graphs), elsewhere and where a kernel declines its inputs the composite implementation, which
defines the result. None has a gradient (their outputs are indices), except that
:func:`radius_graph` reads ``pos`` without recording one.

PyG's :func:`torch_geometric.utils.index_sort` is pyg-lib's radix sort where pyg-lib is
installed and ``torch.sort`` otherwise; :func:`sort_keys` / :func:`argsort_keys` are linear
in either case.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .._tracing import compiling
from . import _backend
from ._common import check_complete_start

__all__ = ["sort_keys", "argsort_keys", "csr_scan", "csr_transpose", "expand_edges", "complete_edges",
           "radius_graph", "NUMPY_ARGSORT_MAX"]

#: largest key count for which the composite :func:`argsort_keys` sorts with numpy on CPU
NUMPY_ARGSORT_MAX = 1 << 16


def _no_triton() -> bool:
    return False


def _native():
    nat = _backend._native_module()
    return nat if nat.available() else None


def _cpu(t: Tensor) -> bool:
    return t.device.type == "cpu"


def _pointer(counts: Tensor) -> Tensor:
    out = counts.new_zeros(counts.numel() + 1)
    torch.cumsum(counts, 0, out=out[1:])
    return out


# ------------------------------------------------------------------------------------ key sorts
def _composite_sort(key: Tensor, perm: bool) -> Tuple[Tensor, Tensor]:
    E = key.numel()
    if not _cpu(key) or E < 2:
        r = torch.sort(key, stable=True)
        return r.values, r.indices
    if not perm:
        return torch.from_numpy(np.sort(key.numpy())), key.new_empty(0)
    if E > NUMPY_ARGSORT_MAX or int(key.min()) < 0 or int(key.max()) > (2 ** 63 - 1) // E - 1:
        r = torch.sort(key, stable=True)
        return r.values, r.indices
    packed = np.sort(key.numpy() * E + np.arange(E))  # unique packed keys: the unstable sort is stable
    return torch.from_numpy(packed // E), torch.from_numpy(packed % E)


def _sort_op_impl(key: Tensor, perm: bool) -> Tuple[Tensor, Tensor]:
    res = []

    def native_ok() -> bool:
        nat = _native()
        r = nat.radix_sort(key, perm=perm) if nat is not None and key.numel() > 1 else None
        res.append(r)
        return r is not None

    if _backend.choose("sort_keys", key.device, native_ok, _no_triton) == "native":
        out, order = res[0]
        return out, order if perm else key.new_empty(0)
    return _composite_sort(key, perm)


_sort_op = torch.library.custom_op("pyg_lie::sort_keys", _sort_op_impl, mutates_args=())


@_sort_op.register_fake
def _(key, perm):
    return torch.empty_like(key), torch.empty_like(key) if perm else key.new_empty(0)


def _key(key, name: str = "key") -> Tensor:
    from .._checks import plain_index
    key = plain_index(name, key)
    if key.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(key.shape)}")
    return key


def _fits(name: str, count: int) -> int:
    """``count`` if an int64 holds it (sizes are computed in int64 by the kernels)."""
    from .._checks import int64_size
    return int64_size(f"the size of {name}", count)


def _reads(*ts: Tensor) -> bool:
    """Value checks may read these tensors (not while tracing, not fake or meta)."""
    from .._checks import _reads_values
    return not compiling() and all(_reads_values(t) for t in ts)


def _csr(crow, col, name: str = "crow") -> Tuple[Tensor, Tensor]:
    """A square CSR pattern of int64 indices, checked: ``crow`` a pointer of the ``E`` edges
    (from 0 to ``E``, non-decreasing), ``col`` in ``[0, N)``."""
    from .._checks import index_range, pointer
    col = _key(col, "col")
    crow = pointer(name, crow, col.numel(), validate=_reads(col))
    if crow.device != col.device:
        raise ValueError(f"{name} is on {crow.device} but col on {col.device}; move both to one device")
    if _reads(col):
        index_range("col", col, crow.numel() - 1)
    return crow, col


def sort_keys(key: Tensor) -> Tensor:
    """Ascending copy of the int64 ``key (E,)`` (other integer types are read as int64, PyG's
    ``Index`` as a plain tensor)."""
    return _backend.call(_sort_op, _sort_op_impl, _key(key), False)[0]


def argsort_keys(key: Tensor) -> Tuple[Tensor, Tensor]:
    """``(sorted key, perm)`` with ``sorted = key[perm]`` for the int64 ``key (E,)``; stable
    (equal keys keep their order)."""
    return _backend.call(_sort_op, _sort_op_impl, _key(key), True)


# ---------------------------------------------------------------------------------- CSR patterns
def composite_csr_scan(src: Tensor, dst: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    """The reference of :func:`csr_scan`."""
    E = dst.numel()
    info = torch.zeros(3, dtype=torch.long, device=dst.device)
    crow = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device)
    if E:
        in_range = bool(((src >= 0) & (src < num_nodes) & (dst >= 0) & (dst < num_nodes)).all())
        ds, ss = dst[1:], src[1:]  # (dst, src) order, compared without a key that could overflow
        if not in_range or bool(((ds < dst[:-1]) | ((ds == dst[:-1]) & (ss < src[:-1]))).any()):
            return crow, info
    crow = torch.searchsorted(dst, torch.arange(num_nodes + 1, device=dst.device))
    degree, complete = degree_and_complete(crow, src, dst, num_nodes)
    info[0], info[1], info[2] = 1, degree, int(complete)
    return crow, info


def degree_and_complete(crow: Tensor, src: Tensor, dst: Tensor, num_nodes: int) -> Tuple[int, bool]:
    """Of edges sorted by ``(dst, src)`` with CSR pointer ``crow``: the common in-degree ``K``
    of every target (0 if they differ), and whether every target's sources are exactly its
    block of ``K`` consecutive nodes (complete graphs of equal size)."""
    deg = crow[1:] - crow[:-1]
    degree = int(deg[0]) if num_nodes and bool((deg == deg[0]).all()) else 0
    complete = False
    if degree and num_nodes % degree == 0:  # is node i's source list its whole block?
        local = torch.arange(degree, device=dst.device).repeat(num_nodes)
        complete = bool((src - (dst - dst % degree) == local).all())
    return degree, complete


def _csr_scan_op_impl(src: Tensor, dst: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    res = []

    def native_ok() -> bool:
        nat = _native()
        r = nat.csr_scan(src, dst, num_nodes) if nat is not None else None
        res.append(r)
        return r is not None

    if _backend.choose("csr_scan", dst.device, native_ok, _no_triton) == "native":
        crow, degree, complete = res[0]
        return crow, torch.tensor([1, degree, int(complete)])
    return composite_csr_scan(src, dst, num_nodes)


_csr_scan_op = torch.library.custom_op("pyg_lie::csr_scan", _csr_scan_op_impl, mutates_args=())


@_csr_scan_op.register_fake
def _(src, dst, num_nodes):
    return dst.new_empty(num_nodes + 1), dst.new_empty(3)


def csr_scan(src: Tensor, dst: Tensor, num_nodes: int) -> Optional[Tuple[Tensor, int, bool]]:
    """For the int64 edges ``src, dst (E,)``: ``(crow (num_nodes + 1,), degree, complete)``
    when they are in non-decreasing ``(dst, src)`` order with every index in
    ``[0, num_nodes)``, else ``None``. ``degree``: the common in-degree ``K >= 1`` of every
    node (else 0); ``complete``: the nodes form consecutive blocks of ``K`` and every node's
    sources are its block."""
    from .._checks import nonnegative_int
    num_nodes = nonnegative_int("num_nodes", num_nodes)
    src, dst = _key(src, "src"), _key(dst, "dst")
    if src.shape != dst.shape or src.device != dst.device:
        raise ValueError(f"src and dst must be one edge list: same shape and device, got {tuple(src.shape)} on "
                         f"{src.device} and {tuple(dst.shape)} on {dst.device}")
    _fits("crow", num_nodes + 1)
    crow, info = _backend.call(_csr_scan_op, _csr_scan_op_impl, src, dst, num_nodes)
    ok, degree, complete = info.tolist()
    return (crow, degree, bool(complete)) if ok else None


def composite_csr_transpose(crow: Tensor, col: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The reference of :func:`csr_transpose`."""
    from ._common import rows_of
    N, E = crow.numel() - 1, col.numel()
    perm_t = torch.sort(col, stable=True).indices
    iperm_t = torch.empty_like(perm_t).index_copy_(0, perm_t, torch.arange(E, device=col.device))
    crow_t = torch.searchsorted(col.index_select(0, perm_t), torch.arange(N + 1, device=col.device))
    col_t = rows_of(crow, E).index_select(0, perm_t)
    return crow_t, col_t, perm_t, iperm_t


def _csr_transpose_op_impl(crow: Tensor, col: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    res = []

    def native_ok() -> bool:
        nat = _native()
        r = nat.csr_transpose(crow, col) if nat is not None else None
        res.append(r)
        return r is not None

    if _backend.choose("csr_transpose", col.device, native_ok, _no_triton) == "native":
        return res[0]
    return composite_csr_transpose(crow, col)


_csr_transpose_op = torch.library.custom_op("pyg_lie::csr_transpose", _csr_transpose_op_impl, mutates_args=())


@_csr_transpose_op.register_fake
def _(crow, col):
    return torch.empty_like(crow), torch.empty_like(col), torch.empty_like(col), torch.empty_like(col)


def csr_transpose(crow: Tensor, col: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(crow_t, col_t, perm_t, iperm_t)`` of the square CSR pattern ``crow (N + 1,)``, ``col
    (E,)`` (sources in ``[0, N)``): the transposed pattern (rows = sources; the edges of a
    source keep their target order), ``perm_t`` the position in ``col`` of every transposed
    edge and ``iperm_t`` its inverse."""
    crow, col = _csr(crow, col)
    return _backend.call(_csr_transpose_op, _csr_transpose_op_impl, crow, col)


# ------------------------------------------------------------------------------- edge lists
def composite_expand_edges(ptr: Tensor, col: Tensor, K: int) -> Tensor:
    """The reference of :func:`expand_edges`."""
    device = col.device
    N = ptr.numel() - 1
    deg = ptr[1:] - ptr[:-1]
    # each base target i owns a block of K * deg_i * K lifted edges, laid out (a, e, b)
    block = deg * K * K
    total = col.numel() * K * K
    owner = torch.arange(N, device=device).repeat_interleave(block, output_size=total)
    local = torch.arange(total, device=device) - _pointer(block)[owner]
    row = deg[owner] * K  # entries per lifted target
    a = torch.div(local, row, rounding_mode="floor")
    rem = local - a * row
    e = ptr[owner] + torch.div(rem, K, rounding_mode="floor")
    b = rem % K
    return torch.stack([col[e] * K + b, owner * K + a])


def _expand_op_impl(ptr: Tensor, col: Tensor, K: int) -> Tensor:
    if _backend.choose("expand_edges", col.device, lambda: _native() is not None, _no_triton) == "native":
        return _native().expand_edges(ptr, col, K)
    return composite_expand_edges(ptr, col, K)


_expand_op = torch.library.custom_op("pyg_lie::expand_edges", _expand_op_impl, mutates_args=())


@_expand_op.register_fake
def _(ptr, col, K):
    return col.new_empty(2, col.shape[0] * K * K)


def expand_edges(ptr: Tensor, col: Tensor, K: int) -> Tensor:
    """``(2, E K^2)`` lifted edges (row 0 source, row 1 target) of the base CSR graph ``ptr (N +
    1,)``, ``col (E,)``: lifted target ``i K + a`` hears ``j K + b`` for every base source ``j``
    of ``i`` and every ``b < K``, in (target, source) order when the sources of every base
    target ascend."""
    from .._checks import positive_int
    K = positive_int("K", K)
    ptr, col = _csr(ptr, col, "ptr")
    if not compiling():  # (symbolic sizes while tracing)
        _fits("the lifted edge list (E K^2)", col.numel() * K * K)
        _fits("the lifted node count (N K)", (ptr.numel() - 1) * K)
    return _backend.call(_expand_op, _expand_op_impl, ptr, col, K)


def composite_complete_edges(start: Tensor) -> Tensor:
    """The reference of :func:`complete_edges`."""
    device = start.device
    counts = start[1:] - start[:-1]
    N = int(start[-1]) if start.numel() else 0
    node_count = counts.repeat_interleave(counts)  # n_b of every node's graph
    node_start = start[:-1].repeat_interleave(counts)
    dst = torch.arange(N, device=device).repeat_interleave(node_count)
    offset = _pointer(node_count)[:-1]
    local = torch.arange(dst.numel(), device=device) - offset.repeat_interleave(node_count)
    src = node_start.repeat_interleave(node_count) + local
    return torch.stack([src, dst])


def _complete_op_impl(start: Tensor) -> Tensor:
    if _backend.choose("complete_edges", start.device, lambda: _native() is not None, _no_triton) == "native":
        return _native().complete_edges(start)
    return composite_complete_edges(start)


_complete_op = torch.library.custom_op("pyg_lie::complete_edges", _complete_op_impl, mutates_args=())


@_complete_op.register_fake
def _(start):
    return start.new_empty(2, torch.library.get_ctx().new_dynamic_size())


def complete_edges(start: Tensor) -> Tensor:
    """``(2, sum_b n_b^2)`` edges (row 0 source, row 1 target) of every ordered pair of nodes of
    the same graph, self pairs included, in (target, source) order, graph ``b`` holding nodes
    ``start[b] .. start[b + 1] - 1`` (``start (B + 1,)`` non-decreasing from 0)."""
    from .._checks import plain_index
    start = plain_index("start", start)
    if start.dim() != 1 or start.numel() < 1:
        raise ValueError(f"start must be a 1-D pointer (the first node of every graph, then N), got shape "
                         f"{tuple(start.shape)}")
    if _reads(start):
        check_complete_start(start)
    return _backend.call(_complete_op, _complete_op_impl, start)


# ------------------------------------------------------------------------------- radius graphs
#: target rows per block of the composite radius graph: blocks of at most 2^22 pairs
_PAIRS = 1 << 22


def composite_radius_graph(pos: Tensor, ptr: Tensor, r: float, loop: bool) -> Tensor:
    """The reference of :func:`radius_graph`: all pairs of a graph, blocks of targets at a time."""
    pos = pos.detach().to(torch.float64)
    N = pos.shape[0]
    graph = torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=pos.device), ptr[1:] - ptr[:-1],
                                    output_size=N)
    chunk = max(1, _PAIRS // max(N, 1))
    parts = []
    for a in range(0, N, chunk):
        b = min(N, a + chunk)
        d2 = (pos[a:b, None, :] - pos[None, :, :]).square().sum(-1)
        keep = (d2 <= r * r) & (graph[a:b, None] == graph[None, :])
        if not loop:
            keep &= torch.arange(a, b, device=pos.device)[:, None] != torch.arange(N, device=pos.device)[None, :]
        i, j = keep.nonzero(as_tuple=True)
        parts.append(torch.stack([j, i + a]))
    return torch.cat(parts, 1) if parts else torch.empty(2, 0, dtype=torch.long, device=pos.device)


def _radius_op_impl(pos: Tensor, ptr: Tensor, r: float, loop: bool) -> Tensor:
    res = []

    def native_ok() -> bool:  # the cell lists decline clouds far denser in places than their box
        nat = _native()
        out = nat.radius_graph(pos, ptr, r, loop) if nat is not None else None
        res.append(out)
        return out is not None

    if _backend.choose("radius_graph", pos.device, native_ok, _no_triton) == "native":
        return res[0]
    return composite_radius_graph(pos, ptr, r, loop)


_radius_op = torch.library.custom_op("pyg_lie::radius_graph", _radius_op_impl, mutates_args=())


@_radius_op.register_fake
def _(pos, ptr, r, loop):
    return ptr.new_empty(2, torch.library.get_ctx().new_dynamic_size())


def radius_graph(pos: Tensor, ptr: Tensor, r: float, loop: bool = False) -> Tensor:
    """``(2, E)`` edges (row 0 source ``j``, row 1 target ``i``, sorted by ``(i, j)``) between
    points of the same graph with ``sum_k (pos[j, k] - pos[i, k])^2 <= r^2`` in float64, for
    ``pos (N, d)`` (finite) and graphs ``ptr[b] .. ptr[b + 1] - 1`` (``ptr (B + 1,)`` from 0
    to ``N``, non-decreasing); ``loop`` adds the self pairs. No gradient."""
    from ._common import plain
    pos, ptr = plain("pos", pos), plain("ptr", ptr)
    if pos.dim() != 2 or not pos.is_floating_point():
        raise ValueError(f"pos must be a floating (N, d) tensor, got {pos.dtype} of shape {tuple(pos.shape)}")
    if ptr.dim() != 1 or ptr.numel() < 1 or ptr.is_floating_point():
        raise ValueError(f"ptr must be a 1-D integer pointer (the first point of every graph, then N), got "
                         f"{ptr.dtype} of shape {tuple(ptr.shape)}")
    r = float(r)
    if not r >= 0 or r == float("inf"):
        raise ValueError(f"r must be finite and >= 0, got {r}")
    from .._checks import pointer_values
    ptr = ptr.long()
    if ptr.device != pos.device:
        raise ValueError(f"ptr is on {ptr.device} but pos on {pos.device}; move both to one device")
    pointer_values("ptr", ptr, pos.shape[0])
    if not bool(torch.isfinite(pos).all()):
        raise ValueError("pos must be finite")
    return _backend.call(_radius_op, _radius_op_impl, pos.detach(), ptr, r, bool(loop))
