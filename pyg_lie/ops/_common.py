"""Input conversion and checks shared by the operators, the autocast rule, and the eager
form of an operator's autograd rule."""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from .._tracing import compiling

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INTS = (torch.int32, torch.int64)


def plain(name: str, t, *, optional: bool = False) -> Optional[Tensor]:
    """``t`` as a plain :class:`torch.Tensor` (subclasses such as PyG's ``EdgeIndex`` are
    unwrapped without a copy); ``TypeError`` naming ``name`` for anything else."""
    if t is None:
        if optional:
            return None
        raise TypeError(f"{name} must be a torch.Tensor, got None")
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if type(t) is not Tensor and not isinstance(t, torch.nn.Parameter):
        t = t.as_subclass(Tensor)
    return t


def float_tensor(name: str, t, dim: int, *, optional: bool = False) -> Optional[Tensor]:
    t = plain(name, t, optional=optional)
    if t is None:
        return None
    if t.dtype not in _FLOATS:
        raise TypeError(f"{name} must be a floating tensor (float16, bfloat16, float32 or float64), got {t.dtype}")
    if t.dim() != dim:
        raise ValueError(f"{name} must have {dim} dimensions, got shape {tuple(t.shape)}")
    return t


def index_tensor(name: str, t) -> Tensor:
    t = plain(name, t)
    if t.dtype not in _INTS:
        raise TypeError(f"{name} must be an int64 (or int32) index tensor, got {t.dtype}; convert it with .long()")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t


def same_device(**ts: Optional[Tensor]) -> torch.device:
    devices = {name: t.device for name, t in ts.items() if t is not None}
    first = next(iter(devices.values()))
    for name, d in devices.items():
        if d != first:
            raise ValueError(f"all tensors must be on one device: {name} is on {d}, "
                             f"{next(iter(devices))} on {first}; move them with .to(device)")
    return first


def autocasting(device: torch.device) -> bool:
    """True inside ``torch.autocast`` for ``device`` (the operators then cast to float32)."""
    if device.type not in ("cpu", "cuda"):
        return False  # (meta tensors: torch knows no autocast state for them)
    try:
        return torch.is_autocast_enabled(device.type)
    except TypeError:  # torch without the device argument
        return torch.is_autocast_enabled() if device.type == "cuda" else torch.is_autocast_cpu_enabled()


def same_dtype(**ts: Optional[Tensor]) -> torch.dtype:
    dtypes = {name: t.dtype for name, t in ts.items() if t is not None}
    first_name, first = next(iter(dtypes.items()))
    for name, d in dtypes.items():
        if d != first:
            raise TypeError(f"{name} has dtype {d} but {first_name} has {first}; cast them to one dtype")
    return first


def check_csr(crow: Tensor, col: Tensor, num_rows: int, num_sources: int) -> None:
    """Shape checks of a CSR pattern (no device sync)."""
    if crow.numel() != num_rows + 1:
        raise ValueError(f"crow must have num_nodes + 1 = {num_rows + 1} entries (one more than q has rows), "
                         f"got {crow.numel()}")


def check_csr_values(crow: Tensor, col: Tensor, num_sources: int, names=("crow", "col")) -> None:
    """Value checks of a CSR pattern (one device sync on GPUs)."""
    E = col.numel()
    if crow.numel() < 1:
        raise ValueError(f"{names[0]} must be a CSR row pointer with at least one entry, got shape {tuple(crow.shape)}")
    bad_ptr = crow[0] != 0
    if crow.numel() > 1:
        bad_ptr = bad_ptr | (crow[-1] != E) | (crow[1:] < crow[:-1]).any()
    bad_col = (col < 0).any() | (col >= num_sources).any() if E else torch.zeros((), dtype=torch.bool)
    if bool(bad_ptr):
        raise ValueError(f"{names[0]} must be a CSR row pointer of the {E} edges: non-decreasing from 0 to {E}")
    if bool(bad_col):
        raise ValueError(f"{names[1]} must hold indices in [0, {num_sources})"
                         + (" (rows of k and v)" if names[1] == "col" else ""))


def validating(validate: Optional[bool], *ts: Optional[Tensor]) -> bool:
    """Whether an entry point checks index values: ``validate``, where ``None`` means for CPU
    tensors (the native kernels read them; on a GPU the check costs a device sync); never
    while tracing (data-dependent checks would break the graph)."""
    from .._checks import _reads_values
    if compiling() or not all(t is None or _reads_values(t) for t in ts):
        return False
    if validate is None:
        return all(t is None or t.device.type == "cpu" for t in ts)
    return bool(validate)


def check_permutation(name: str, t: Tensor, size: int) -> None:
    """``t`` must be ``(size,)`` with every entry in ``[0, size)`` (the value check reads it)."""
    from .._checks import index_range
    if t.numel() != size:
        raise ValueError(f"{name} must have one entry per edge ({size}), got shape {tuple(t.shape)}")
    index_range(name, t, size, "edge")


def check_transpose(crow_t: Optional[Tensor], col_t: Optional[Tensor], perm_t: Optional[Tensor],
                    iperm_t: Optional[Tensor], num_rows: int, num_sources: int, num_edges: int,
                    validate: bool) -> Tuple[Optional[Tensor], ...]:
    """The optional transposed pattern of a CSR pattern (rows = its ``num_sources`` sources,
    columns its ``num_rows`` targets): all four or none, of matching sizes, and with
    ``validate`` of valid values."""
    given = [t is not None for t in (crow_t, col_t, perm_t, iperm_t)]
    if not any(given):
        return None, None, None, None
    if not all(given):
        raise ValueError("crow_t, col_t, perm_t and iperm_t (the transposed pattern) go together: pass all four "
                         "or none")
    crow_t, col_t = index_tensor("crow_t", crow_t), index_tensor("col_t", col_t)
    perm_t, iperm_t = index_tensor("perm_t", perm_t), index_tensor("iperm_t", iperm_t)
    if crow_t.numel() != num_sources + 1 or col_t.numel() != num_edges:
        raise ValueError(f"the transposed pattern must have crow_t ({num_sources + 1},) and col_t ({num_edges},), "
                         f"got {tuple(crow_t.shape)} and {tuple(col_t.shape)}")
    if validate:
        check_csr_values(crow_t, col_t, num_rows, names=("crow_t", "col_t"))
    for name, t in (("perm_t", perm_t), ("iperm_t", iperm_t)):
        if t.numel() != num_edges:
            raise ValueError(f"{name} must have one entry per edge ({num_edges}), got shape {tuple(t.shape)}")
        if validate:
            check_permutation(name, t, num_edges)
    return crow_t, col_t, perm_t, iperm_t


def rows_of(crow: Tensor, num_edges: int) -> Tensor:
    """The target row of every edge of the CSR pointer ``crow``."""
    n = crow.numel() - 1
    deg = crow[1:] - crow[:-1]
    return torch.repeat_interleave(torch.arange(n, device=crow.device), deg, output_size=num_edges)


def transpose_csr(crow: Tensor, col: Tensor, num_sources: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(crow_t, col_t, perm_t)``: the CSR pattern of the transpose (rows = sources), the
    target of every transposed edge, and the position in ``col`` of every transposed edge
    (stable: equal sources keep their target order)."""
    col = col.long()
    perm_t = torch.sort(col, stable=True).indices
    col_t = rows_of(crow, col.numel()).index_select(0, perm_t)
    counts = torch.bincount(col, minlength=num_sources)
    crow_t = torch.zeros(num_sources + 1, dtype=torch.long, device=col.device)
    torch.cumsum(counts, 0, out=crow_t[1:])
    return crow_t, col_t, perm_t


def float32_under_autocast(*ops) -> None:
    """Under ``torch.autocast`` run ``ops`` in float32 (floating inputs other than float64 are
    cast), as autocast runs its reductions (softmax)."""
    for op in ops:
        for device in ("cpu", "cuda"):
            try:
                op.register_autocast(device, torch.float32)
            except (ValueError, RuntimeError):  # a build without that device's autocast
                pass


def eager_function(name: str, impl: Callable, setup: Callable, backward: Callable) -> type:
    """A :class:`torch.autograd.Function` running ``impl`` with the autograd rule registered on
    its operator (``setup`` as ``setup_context``, ``backward``), for eager calls that skip the
    dispatcher (:func:`pyg_lie.ops._backend.direct`)."""

    def forward(ctx, *inputs):
        output = impl(*inputs)
        setup(ctx, inputs, output)
        return output

    return type(name, (torch.autograd.Function,), {
        "__doc__": f"{impl.__name__} with its operator's autograd rule, without the dispatcher.",
        "forward": staticmethod(forward),
        "backward": staticmethod(backward),
    })


def check_complete_start(start: Tensor) -> int:
    """The edge count ``sum_b n_b^2`` of :func:`complete_edges`' pointer ``start`` (int64, 1-D),
    after checking that it starts at 0 and never decreases, and that the count and the node
    count fit an int64; ``ValueError`` otherwise. Vectorised: the squares are summed in float64
    first, and exactly only where the float sum shows no overflow."""
    sizes = start[1:] - start[:-1]
    first = int(start[0])
    if first != 0:
        raise ValueError(f"start must begin at 0 (the first node of every graph, then N), got {first}")
    if sizes.numel() and int(sizes.min()) < 0:
        raise ValueError("start must be non-decreasing (the first node of every graph, then N)")
    approx = float(sizes.double().square().sum()) if sizes.numel() else 0.0
    if approx >= 2.0 ** 62:
        raise ValueError(f"start describes graphs with {approx:.3g} node pairs in all, more than an int64 holds "
                         f"(2^63 - 1); the largest graph has {int(sizes.max())} nodes")
    from .._checks import int64_size
    return int64_size("the size of the complete edge list", int(sizes.square().sum()) if sizes.numel() else 0)
