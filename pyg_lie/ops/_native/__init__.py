"""Native CPU kernels, compiled on first use with the system's C compiler and loaded with ctypes:
the CPU implementations of the operators of :mod:`pyg_lie.ops`, which are their only callers.

:func:`headwise_forward` / :func:`headwise_backward` run the fused edge MLPs of
``headwise_mlp.c`` (float32): one MLP per head or one shared ``Linear``/``SiLU`` MLP (a single
"head" with several outputs), for ``pyg_lie::mlp``. :func:`csr_sddmm` / :func:`csr_spmm` run
the multi-head CSR products of ``csr_products.c`` (float32 and float64, ``pyg_lie::csr_sddmm``
and ``csr_spmm``), and :func:`csr_attention` / :func:`csr_attention_backward` (same file,
float32) the fused softmax attention (``pyg_lie::csr_attention``). For building graphs:
:func:`radix_sort` (``radix_sort.c``, ``pyg_lie::sort_keys``), :func:`expand_edges` /
:func:`complete_edges` (``edge_lists.c``), :func:`csr_scan` / :func:`csr_transpose`
(``csr_scan.c``) and :func:`radius_graph` (``radius_graph.c``, cell lists).
:func:`se2_relative_log` (``se2_log.c``) computes SE(2) relative logarithms in one pass, and
:func:`segment_softmax` / :func:`segment_softmax_backward` (``segment_softmax.c``) the softmax
over target-sorted edges. The ``*.c`` files here (with ``simd.h``, their eight-float vector
type and helpers, ``csr.h``, the CSR-pointer check, and ``softmax.h``, the softmax of one
segment) are built into one shared library, once per sources, compiler flags and CPU, into
``$PYG_LIE_CACHE`` (default ``$XDG_CACHE_HOME/pyg_lie`` or ``~/.cache/pyg_lie``) with ``-O3
-march=native -fopenmp``; it needs only a C compiler (``$CC`` or ``cc``), no PyTorch headers,
and builds in about a second. Its threads are torch's: the OpenMP runtime it links
(``libgomp.so.1``) resolves, in a process that imported torch, to the copy torch loaded, so
``torch.set_num_threads`` applies and no second pool competes with torch's spinning workers.
Where no compiler works, a warning says why once and the operators run their composite
(pure torch) implementations (same values, slower).
``PYG_LIE_NATIVE=0`` disables the native kernels.
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor

from ..._tracing import fake_mode

__all__ = ["available", "uses_openmp", "headwise_supported", "headwise_forward", "headwise_backward",
           "csr_supported", "csr_sddmm", "csr_spmm", "radix_sort", "expand_edges", "complete_edges", "csr_scan",
           "csr_transpose",
           "se2_relative_log", "radius_graph", "segment_softmax_supported", "segment_softmax", "segment_softmax_backward",
           "library_path"]

_SOURCES = sorted(Path(__file__).parent.glob("*.c"))
_HEADERS = sorted(Path(__file__).parent.glob("*.h"))  # included by the sources: part of the cache key
_FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-std=gnu11"]
#: tried in order: OpenMP (libgomp.so.1, which in a process with torch loaded is torch's own
#: copy, so the kernels share torch's intra-op threads) with -march=native, then without
#: -march=native (some compilers/targets reject it), then serial
_VARIANTS = (["-fopenmp", "-march=native"], ["-fopenmp"], ["-march=native"], [])
#: limits compiled into headwise_mlp.c
MAX_IN, MAX_HIDDEN, MAX_LAYERS = 16, 32, 4

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_failed: Optional[str] = None


def _cache_dir() -> Path:
    if os.environ.get("PYG_LIE_CACHE"):
        return Path(os.environ["PYG_LIE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyg_lie"


def _cpu_id() -> str:
    """What ``-march=native`` depends on: the CPU's model and flags."""
    try:
        with open("/proc/cpuinfo") as f:
            return "".join(sorted({line for line in f if line.startswith(("model name", "flags"))}))
    except OSError:
        import platform
        return platform.processor() + platform.machine()


def _build(cc: List[str], target: Path) -> Optional[str]:
    """Compile into ``target`` (atomically: concurrent processes may build the same file);
    returns the error text, or None."""
    tmp = None
    err = ""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        for variant in _VARIANTS:
            r = subprocess.run([*cc, *_FLAGS, *variant, "-o", tmp, *map(str, _SOURCES)],
                               capture_output=True, text=True)
            if r.returncode == 0:
                os.replace(tmp, target)
                return None
            err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit status {r.returncode}"
        return err
    except OSError as e:  # no compiler, or the cache folder is not writable
        return str(e)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _compiler() -> List[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def library_path() -> Path:
    """Where the compiled kernels for these sources, compiler and CPU live."""
    cc = _compiler()
    parts = [*(p.read_bytes() for p in _SOURCES + _HEADERS), repr((cc, _FLAGS, _VARIANTS)).encode(), _cpu_id().encode(),
             sys.platform.encode()]
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    return _cache_dir() / f"pyg_lie_native-{key}.so"


def _load() -> Optional[ctypes.CDLL]:
    global _lib, _failed
    if _lib is not None or _failed is not None:
        return _lib
    with _lock:
        if _lib is not None or _failed is not None:
            return _lib
        path = library_path()
        err = None if path.exists() else _build(_compiler(), path)
        if err is None:
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                err = str(e)
        if err is not None:
            _failed = err
            warnings.warn(f"pyg_lie: could not build the native kernels (edge MLP, CSR products) ({err}); "
                          f"using the slower torch kernels. Set CC to a working C compiler, PYG_LIE_CACHE to a "
                          f"writable folder, or PYG_LIE_NATIVE=0 to silence this.", RuntimeWarning, stacklevel=3)
            return None
        ptrs = ctypes.POINTER(ctypes.c_void_p)
        common = [ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_void_p, ptrs, ptrs]
        lib.headwise_mlp_forward.argtypes = [*common, ctypes.c_void_p, ctypes.c_int]
        lib.headwise_mlp_backward.argtypes = [*common, ctypes.c_void_p, ctypes.c_void_p, ptrs, ptrs, ctypes.c_int]
        lib.headwise_mlp_forward.restype = lib.headwise_mlp_backward.restype = ctypes.c_int
        lib.headwise_mlp_openmp.argtypes, lib.headwise_mlp_openmp.restype = [], ctypes.c_int
        for name in ("csr_sddmm_f32", "csr_sddmm_f64", "csr_spmm_f32", "csr_spmm_f64"):
            fn = getattr(lib, name)
            pointers = 6 if "spmm" in name else 5  # SpMM: the weights' permutation too
            fn.argtypes = [*[ctypes.c_int64] * 5, *[ctypes.c_void_p] * pointers, ctypes.c_int]
            fn.restype = ctypes.c_int
        lib.csr_attention_f32.argtypes = [*[ctypes.c_int64] * 4, *[ctypes.c_void_p] * 8, ctypes.c_int]
        lib.csr_attention_backward_f32.argtypes = [*[ctypes.c_int64] * 4, *[ctypes.c_void_p] * 15, ctypes.c_int]
        lib.csr_attention_f32.restype = lib.csr_attention_backward_f32.restype = ctypes.c_int
        lib.radix_sort_i64.argtypes = [ctypes.c_int64, *[ctypes.c_void_p] * 4]
        lib.radix_sort_i64.restype = ctypes.c_int
        lib.expand_edges_i64.argtypes = [*[ctypes.c_int64] * 3, *[ctypes.c_void_p] * 4, ctypes.c_int]
        lib.expand_edges_i64.restype = ctypes.c_int
        lib.complete_edges_i64.argtypes = [ctypes.c_int64, *[ctypes.c_void_p] * 3, ctypes.c_int]
        lib.complete_edges_i64.restype = ctypes.c_int
        lib.csr_scan_i64.argtypes = [ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 4]
        lib.csr_scan_i64.restype = ctypes.c_int
        lib.csr_transpose_i64.argtypes = [ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 6]
        lib.csr_transpose_i64.restype = ctypes.c_int
        lib.se2_relative_log_f32.argtypes = [ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 4, ctypes.c_int,
                                             ctypes.c_float, ctypes.c_int]
        lib.se2_relative_log_f32.restype = ctypes.c_int
        lib.radius_graph_build.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                                           ctypes.c_void_p, ctypes.c_double, ctypes.c_double, ctypes.c_int,
                                           ctypes.c_void_p, ctypes.c_int]
        lib.radius_graph_build.restype = ctypes.c_void_p
        lib.radius_graph_fill.argtypes = [ctypes.c_void_p, *[ctypes.c_void_p] * 3, ctypes.c_int]
        lib.radius_graph_fill.restype = None
        lib.segment_softmax_f32.argtypes = [*[ctypes.c_int64] * 3, *[ctypes.c_void_p] * 3, ctypes.c_int]
        lib.segment_softmax_backward_f32.argtypes = [*[ctypes.c_int64] * 3, *[ctypes.c_void_p] * 4, ctypes.c_int]
        lib.segment_softmax_f32.restype = lib.segment_softmax_backward_f32.restype = ctypes.c_int
        _lib = lib
        return lib


# ------------------------------------------------------------------ the boundary to C
# Every function below hands C only plain, contiguous CPU tensors of the dtype its kernel
# reads (`_plain`: tensor subclasses such as PyG's `EdgeIndex` / `Index`, whose `data_ptr()`
# is 0, are copied into fresh tensors), checks every size the kernel trusts (O(1)), and turns a
# kernel's report of an index outside its range or a bad CSR pointer (`CSR_BAD_INDEX` of
# `csr.h`; the kernels check ranges row by row while the row's indices are in cache, not in a
# pass of their own) into a ValueError. Under a fake-tensor mode (tracing, `torch.export`,
# `FakeTensorMode`) or for meta tensors nothing reaches C: `available()` is False and the
# callers take their torch paths.

_BAD_INDEX = 3  # CSR_BAD_INDEX of csr.h


def _has_storage(t: Tensor) -> bool:
    """False for tensors whose memory C cannot read: meta and fake tensors (and, with them,
    anything traced)."""
    return t.device.type != "meta" and not isinstance(t, FakeTensor)


def usable(*ts: Optional[Tensor]) -> bool:
    """True if the kernels may read these tensors: real CPU tensors, no fake mode active, and
    the kernels built (:func:`available`)."""
    return (all(t is None or (t.device.type == "cpu" and _has_storage(t)) for t in ts) and available())


def available() -> bool:
    """True if the native kernels are enabled (``PYG_LIE_NATIVE`` is not ``0``) and built, and
    no fake-tensor mode is active (under one, the callers take their torch paths)."""
    return os.environ.get("PYG_LIE_NATIVE", "1") != "0" and not fake_mode() and _load() is not None


def uses_openmp() -> bool:
    """True if the kernels were built with OpenMP (multi-threaded), False if serial."""
    return bool(_library().headwise_mlp_openmp())


def _plain(t: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
    """``t`` as C reads it: a plain contiguous CPU ``torch.Tensor`` (of ``dtype`` where given).
    Subclasses (``EdgeIndex``, ``Index``, ...) are copied into a fresh tensor: their own
    ``contiguous()`` / ``to()`` keep the subclass and may hand out a null data pointer."""
    if not _has_storage(t) or fake_mode():
        raise RuntimeError("pyg_lie native kernels called on a fake or meta tensor; the callers must take "
                           "their torch paths (pyg_lie.ops._native.available() is False under a fake mode)")
    if t.device.type != "cpu":
        raise ValueError(f"pyg_lie native kernels take CPU tensors, got one on {t.device}")
    dtype = t.dtype if dtype is None else dtype
    if type(t) is not Tensor and not isinstance(t, torch.nn.Parameter):
        t = torch.empty(t.shape, dtype=dtype).copy_(t)
    elif t.dtype != dtype:
        t = t.to(dtype)
    t = t.contiguous()
    if t.numel() and not t.data_ptr():
        raise RuntimeError(f"pyg_lie native kernels: a {type(t).__name__} without memory")
    return t


def _i64(*ts: Tensor) -> List[Tensor]:
    """Index tensors as the kernels take them: plain, int64, contiguous."""
    out = []
    for t in ts:
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"index tensors must hold integers, got {t.dtype}")
        out.append(_plain(t, torch.int64))
    return out


def _pointer_arg(name: str, ptr: Tensor) -> Tensor:
    (ptr,) = _i64(ptr)
    if ptr.dim() != 1 or ptr.numel() < 1:
        raise ValueError(f"{name} must be a 1-D pointer with at least one entry, got shape {tuple(ptr.shape)}")
    return ptr


def _library() -> ctypes.CDLL:
    lib = _load()
    if lib is None:
        raise RuntimeError(f"pyg_lie native kernels unavailable: {_failed}")
    return lib


def _check(rc: int, what: str, bad_index: str = "") -> None:
    if rc == _BAD_INDEX:
        raise ValueError(f"{what}: {bad_index or 'an index lies outside its range or a pointer is not a CSR pointer'}")
    if rc:
        raise RuntimeError(f"pyg_lie native {what} failed ({'unsupported sizes' if rc == 1 else 'out of memory'})")


def headwise_supported(x: Tensor, params: Sequence[Tensor]) -> bool:
    """True if the native kernel handles ``x (E, in)`` and the parameters
    ``[W_0 (H, K, in), b_0 (H, K), ..., W_L (H, O, K), b_L (H, O)]`` of ``H`` MLPs with
    hidden layers of equal width ``K`` and ``O`` outputs each (:class:`HeadwiseMLP`: ``O = 1``;
    one shared MLP: ``H = 1``). ``ValueError`` if ``x``'s width is not the MLPs' input width."""
    if x.dim() == 2 and params and params[0].dim() == 3 and x.shape[1] != params[0].shape[2]:
        raise ValueError(f"the edge MLP takes {params[0].shape[2]} input features per edge, got edge features "
                         f"of shape {tuple(x.shape)}")
    if x.device.type != "cpu" or x.dtype != torch.float32 or x.dim() != 2 or x.shape[0] == 0:
        return False
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
        return False
    weights, layers = params[0::2], len(params) // 2 - 1
    if not 1 <= layers <= MAX_LAYERS or any(w.dim() != 3 for w in weights):
        return False
    H, K, n_in = weights[0].shape
    hidden_ok = all(w.shape == (H, K, K) for w in weights[1:-1]) and weights[-1].shape[::2] == (H, K)
    biases_ok = all(b.dim() == 2 and b.shape == w.shape[:2] for w, b in zip(weights, params[1::2]))
    return (hidden_ok and biases_ok and n_in <= MAX_IN and K <= MAX_HIDDEN and weights[-1].shape[1] <= MAX_HIDDEN
            and usable(x, *params))


def _sizes(x: Tensor, params: Sequence[Tensor]):
    H, K, n_in = params[0].shape
    return x.shape[0], n_in, K, len(params) // 2 - 1, H, params[-2].shape[1]


def _pointers(ts: Sequence[Tensor]):
    return (ctypes.c_void_p * len(ts))(*[t.data_ptr() for t in ts])


def headwise_forward(x: Tensor, params: Sequence[Tensor]) -> Tensor:
    """``(H O, E)`` outputs of the MLPs, row ``h O + o`` (see :func:`headwise_supported`)."""
    if not headwise_supported(x, params):
        raise ValueError("headwise_forward: these inputs are not supported (see headwise_supported)")
    x = _plain(x)
    params = [_plain(p.detach()) for p in params]
    sizes = _sizes(x, params)
    out = x.new_empty(sizes[4] * sizes[5], x.shape[0])
    rc = _library().headwise_mlp_forward(*sizes, x.data_ptr(), _pointers(params[0::2]), _pointers(params[1::2]),
                                         out.data_ptr(), torch.get_num_threads())
    _check(rc, "forward")
    return out


def headwise_backward(grad_out: Tensor, x: Tensor, params: Sequence[Tensor], need_x: bool) -> List[Tensor]:
    """``[d/dx (empty unless need_x), d/dW_0, d/db_0, ...]`` for ``grad_out (H O, E)``."""
    if not headwise_supported(x, params):
        raise ValueError("headwise_backward: these inputs are not supported (see headwise_supported)")
    x, grad_out = _plain(x), _plain(grad_out, torch.float32)
    params = [_plain(p.detach()) for p in params]
    sizes = _sizes(x, params)
    if grad_out.shape != (sizes[4] * sizes[5], x.shape[0]):
        raise ValueError(f"headwise_backward: grad_out must have shape {(sizes[4] * sizes[5], x.shape[0])}, "
                         f"got {tuple(grad_out.shape)}")
    gx = torch.zeros_like(x) if need_x else x.new_empty(0)
    gp = [torch.zeros_like(p) for p in params]
    rc = _library().headwise_mlp_backward(*sizes, x.data_ptr(), _pointers(params[0::2]),
                                          _pointers(params[1::2]), grad_out.data_ptr(),
                                          gx.data_ptr() if need_x else None, _pointers(gp[0::2]),
                                          _pointers(gp[1::2]), torch.get_num_threads())
    _check(rc, "backward")
    return [gx, *gp]


def csr_supported(*ts: Tensor) -> bool:
    """True if the native CSR products take these operands: CPU, all float32 or all float64."""
    dtype = ts[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.dtype == dtype for t in ts) and usable(*ts)


_CSR_MISMATCH = ("the CSR pattern does not fit the features: a source index outside [0, {M}) or a row pointer "
                 "that is not one of the {E} edges (a csr / CSRStructure built for another graph?)")


def _csr_pattern(crow: Tensor, col: Tensor, N: int, what: str) -> Tuple[Tensor, Tensor]:
    crow, col = _i64(crow, col)
    if crow.dim() != 1 or crow.numel() != N + 1 or col.dim() != 1:
        raise ValueError(f"{what}: the CSR pattern has {crow.numel() - 1} rows but the features {N} nodes "
                         f"(a csr / CSRStructure built for another graph? build it with "
                         f"CSRStructure.build(edge_index, num_nodes))")
    return crow, col


def _csr_call(kind: str, X: Tensor, Y: Tensor, crow: Tensor, col: Tensor, out: Tensor, M: int, H: int, D: int,
              *extra: Optional[Tensor]) -> Tensor:
    suffix = "f32" if out.dtype == torch.float32 else "f64"
    rc = getattr(_library(), f"csr_{kind}_{suffix}")(crow.numel() - 1, M, H, D, col.numel(), X.data_ptr(),
                                                    Y.data_ptr(), crow.data_ptr(), col.data_ptr(),
                                                    *(None if t is None else t.data_ptr() for t in extra),
                                                    out.data_ptr(), torch.get_num_threads())
    _check(rc, f"csr_{kind}", _CSR_MISMATCH.format(M=M, E=col.numel()))
    return out


def csr_sddmm(A: Tensor, B: Tensor, crow: Tensor, col: Tensor) -> Tensor:
    """``(H, E)`` scores ``A[i, h] . B[j, h]`` on the CSR edges ``j -> i`` (rows ``i`` by
    ``crow``, sources ``col``) for ``A (N, H, D)`` and ``B (M, H, D)``."""
    if A.dim() != 3 or B.dim() != 3 or A.shape[1:] != B.shape[1:] or A.dtype != B.dtype:
        raise ValueError(f"csr_sddmm takes A (N, H, D) and B (M, H, D) of one dtype, got {tuple(A.shape)} "
                         f"{A.dtype} and {tuple(B.shape)} {B.dtype}")
    A, B = _plain(A), _plain(B)
    crow, col = _csr_pattern(crow, col, A.shape[0], "csr_sddmm")
    out = A.new_empty(A.shape[1], col.numel())
    return _csr_call("sddmm", A, B, crow, col, out, B.shape[0], A.shape[1], A.shape[2])


def csr_spmm(w: Tensor, V: Tensor, crow: Tensor, col: Tensor, wperm: Optional[Tensor] = None) -> Tensor:
    """``(N, H, Dv)`` sums ``sum_{j -> i} w[h, e] V[j, h]`` over the CSR edges for ``w (H, E)``
    and ``V (M, H, Dv)``; with ``wperm (E,)``, edge ``e`` takes the weights ``w[:, wperm[e]]``
    (``w`` is then in another edge order, a permutation of this pattern's)."""
    if w.dim() != 2 or V.dim() != 3 or w.shape[0] != V.shape[1] or w.dtype != V.dtype:
        raise ValueError(f"csr_spmm takes w (H, E) and V (M, H, Dv) of one dtype, got {tuple(w.shape)} "
                         f"{w.dtype} and {tuple(V.shape)} {V.dtype}")
    w, V = _plain(w), _plain(V)
    crow, col = _i64(crow, col)
    if crow.dim() != 1 or crow.numel() < 1 or col.dim() != 1 or w.shape[1] != col.numel():
        raise ValueError(f"csr_spmm: the weights have {w.shape[1]} edges, the CSR pattern {col.numel()} "
                         f"(and {crow.numel() - 1} rows)")
    if wperm is not None:
        (wperm,) = _i64(wperm)
        if wperm.shape != col.shape:
            raise ValueError(f"csr_spmm: wperm must have one entry per edge ({col.numel()}), got {tuple(wperm.shape)}")
    out = V.new_empty(crow.numel() - 1, V.shape[1], V.shape[2])
    return _csr_call("spmm", w, V, crow, col, out, V.shape[0], V.shape[1], V.shape[2], wperm)


def csr_attention_supported(*ts: Tensor) -> bool:
    """True if :func:`csr_attention` takes these tensors: float32 on CPU, and for the
    ``(N, H, D)`` features among them ``D`` a multiple of 8."""
    return (all(t.dtype == torch.float32 for t in ts)
            and all(t.shape[-1] % 8 == 0 for t in ts if t.dim() == 3) and usable(*ts))


def _attention_shapes(q: Tensor, k: Tensor, v: Tensor, l: Tensor, E: int, what: str) -> None:
    if q.dim() != 3 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"{what} takes q, k, v of one shape (N, H, D), got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if l.shape != (q.shape[1], E):
        raise ValueError(f"{what}: the location scores must have shape (H, E) = {(q.shape[1], E)}, one per head "
                         f"and edge, got {tuple(l.shape)} (location features of another length, e.g. a rel_log "
                         f"that is not of these edges?)")


def csr_attention(q: Tensor, k: Tensor, v: Tensor, l: Tensor, crow: Tensor,
                  col: Tensor) -> Optional[Tuple[Tensor, Tensor]]:
    """Fused softmax attention on the CSR edges ``j -> i`` (rows by ``crow``, sources ``col``):
    ``(out (N, H, D), w (H, E))`` with ``w[h]`` the softmax over each row's edges of
    ``q[i, h] . k[j, h] + l[h, e]`` and ``out[i, h] = sum w[h, e] v[j, h]``, for
    ``q, k, v (N, H, D)`` and ``l (H, E)`` (see :func:`csr_attention_supported`). ``None``
    where the kernel does not take the head width; ``ValueError`` if ``crow`` is not a
    pointer of the edges or a source is out of range."""
    if not csr_attention_supported(q, k, v, l):
        return None
    q, k, v, l = (_plain(t) for t in (q, k, v, l))
    crow, col = _csr_pattern(crow, col, q.shape[0], "csr_attention")
    _attention_shapes(q, k, v, l, col.numel(), "csr_attention")
    (N, H, D), E = q.shape, col.numel()
    w, out = l.new_empty(H, E), q.new_empty(N, H, D)
    rc = _library().csr_attention_f32(N, H, D, E, q.data_ptr(), k.data_ptr(), v.data_ptr(), l.data_ptr(),
                                      crow.data_ptr(), col.data_ptr(), w.data_ptr(), out.data_ptr(),
                                      torch.get_num_threads())
    if rc == 1:
        return None
    _check(rc, "csr_attention", _CSR_MISMATCH.format(M=N, E=E))
    return out, w


def csr_attention_backward(q: Tensor, k: Tensor, v: Tensor, w: Tensor, g: Tensor, gw: Optional[Tensor],
                           crow: Tensor, col: Tensor, crow_t: Tensor, col_t: Tensor,
                           perm_t: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(gq, gk, gv, gl)`` of :func:`csr_attention` for the output gradient ``g (N, H, D)``
    and optionally a gradient ``gw (H, E)`` of the weights, given the forward's ``w``, on the
    pattern and its transpose (``crow_t``, ``col_t``, ``perm_t`` of
    :meth:`~pyg_lie.ops.CSRStructure.parts`)."""
    q, k, v, w, g = (_plain(t, torch.float32) for t in (q, k, v, w, g))
    gw = None if gw is None else _plain(gw, torch.float32)
    crow, col = _csr_pattern(crow, col, q.shape[0], "csr_attention_backward")
    crow_t, col_t = _csr_pattern(crow_t, col_t, q.shape[0], "csr_attention_backward")
    (perm_t,) = _i64(perm_t)
    E = col.numel()
    _attention_shapes(q, k, v, w, E, "csr_attention_backward")
    if g.shape != q.shape or (gw is not None and gw.shape != w.shape) or col_t.numel() != E or perm_t.numel() != E:
        raise ValueError("csr_attention_backward: gradients or transposed pattern of the wrong size")
    (N, H, D) = q.shape
    gq, gk, gv, gl = q.new_empty(N, H, D), q.new_empty(N, H, D), q.new_empty(N, H, D), w.new_empty(H, E)
    rc = _library().csr_attention_backward_f32(
        N, H, D, E, *(t.data_ptr() for t in (q, k, v, w, g)), None if gw is None else gw.data_ptr(),
        *(t.data_ptr() for t in (crow, col, crow_t, col_t, perm_t, gq, gk, gv, gl)), torch.get_num_threads())
    _check(rc, "csr_attention_backward", _CSR_MISMATCH.format(M=N, E=E))
    return gq, gk, gv, gl


def radix_sort(key: Tensor, perm: bool = True) -> Optional[Tuple[Tensor, Optional[Tensor]]]:
    """``(sorted, perm)`` of the int64 CPU tensor ``key (n,)`` of values ``>= 0``, stable
    (``sorted = key[perm]``, equal keys in their input order; ``perm`` is ``None`` unless
    asked for). Linear time (a radix sort), unlike torch's and numpy's comparison sorts.
    ``None`` when a key is negative, or keys and positions need more than 63 bits together
    (the bit widths of the largest key and of ``n - 1`` add up to more than 63), or ``key``
    cannot be read (a fake tensor): the caller sorts otherwise."""
    if key.dtype != torch.int64 or key.dim() != 1 or key.device.type != "cpu":
        raise ValueError(f"radix_sort takes a 1-D int64 CPU tensor, got {key.dtype} of shape "
                         f"{tuple(key.shape)} on {key.device}")
    if not usable(key):
        return None
    (key,) = _i64(key)
    out, order, tmp = torch.empty_like(key), torch.empty_like(key) if perm else None, torch.empty_like(key)
    rc = _library().radix_sort_i64(key.numel(), key.data_ptr(), out.data_ptr(), order.data_ptr() if perm else None,
                                   tmp.data_ptr())
    return None if rc else (out, order)


def expand_edges(ptr: Tensor, col: Tensor, K: int) -> Tensor:
    """``(2, E K^2)`` lifted edges (row 0 source, row 1 target) of the base CSR graph
    ``ptr (N + 1,)``, ``col (E,)`` (int64, CPU, sources ascending within each target): lifted
    target ``i K + a`` hears ``j K + b`` for every base source ``j`` of ``i`` and ``b < K``, in
    (target, source) order."""
    K = int(K)
    if K < 1:
        raise ValueError(f"K must be a positive int, got {K}")
    ptr = _pointer_arg("ptr", ptr)
    (col,) = _i64(col)
    from ..._checks import int64_size
    total = int64_size("the lifted edge list (E K^2)", col.numel() * K * K)
    int64_size("the lifted node count (N K)", (ptr.numel() - 1) * K)
    out = col.new_empty(2, total)
    rc = _library().expand_edges_i64(ptr.numel() - 1, col.numel(), K, ptr.data_ptr(), col.data_ptr(),
                                     out[0].data_ptr(), out[1].data_ptr(), torch.get_num_threads())
    _check(rc, "expand_edges", f"ptr must be a CSR pointer of the {col.numel()} base edges")
    return out


def complete_edges(start: Tensor) -> Tensor:
    """``(2, sum_b n_b^2)`` edges (row 0 source, row 1 target) of every ordered pair of nodes
    of the same graph, self pairs included, in (target, source) order, graph ``b`` holding
    nodes ``start[b] .. start[b + 1] - 1`` (``start (B + 1,)``, int64, CPU, non-decreasing)."""
    from .._common import check_complete_start
    start = _pointer_arg("start", start)
    out = start.new_empty(2, check_complete_start(start))  # the count checked against int64 overflow
    rc = _library().complete_edges_i64(start.numel() - 1, start.data_ptr(), out[0].data_ptr(), out[1].data_ptr(),
                                       torch.get_num_threads())
    _check(rc, "complete_edges", "start must be non-decreasing")
    return out


def csr_scan(src: Tensor, dst: Tensor, num_nodes: int) -> Optional[Tuple[Tensor, int, bool]]:
    """For edges ``src, dst (E,)`` (int64, CPU) in ``(dst, src)`` order with every index in
    ``[0, num_nodes)``: ``(crow (num_nodes + 1,), degree, complete)`` as in
    :class:`~pyg_lie.ops.CSRStructure`, in one pass; ``None`` otherwise (unsorted
    or out of range, or tensors C cannot read), for the caller's general path."""
    if not usable(src, dst) or src.shape != dst.shape or src.dim() != 1 or num_nodes < 0:
        return None
    src, dst = _i64(src, dst)
    crow = dst.new_empty(num_nodes + 1)
    info = dst.new_zeros(2)
    if _library().csr_scan_i64(dst.numel(), num_nodes, src.data_ptr(), dst.data_ptr(), crow.data_ptr(),
                               info.data_ptr()):
        return None
    return crow, int(info[0]), bool(info[1])


def csr_transpose(crow: Tensor, col: Tensor) -> Optional[Tuple[Tensor, Tensor, Tensor, Tensor]]:
    """``(crow_t, col_t, perm_t, iperm_t)``: the transposed pattern of the CSR graph ``crow
    (N + 1,)``, ``col (E,)`` (int64, CPU) as in
    :meth:`~pyg_lie.ops.CSRStructure.parts`, by one counting sort of the sources;
    ``None`` if a source is out of range or ``crow`` is not a pointer of ``E`` edges (or the
    tensors cannot be read)."""
    if not usable(crow, col) or crow.dim() != 1 or crow.numel() < 1 or col.dim() != 1:
        return None
    crow, col = _i64(crow, col)
    crow_t = torch.empty_like(crow)
    col_t, perm_t, iperm_t = (torch.empty_like(col) for _ in range(3))
    if _library().csr_transpose_i64(crow.numel() - 1, col.numel(), crow.data_ptr(), col.data_ptr(), crow_t.data_ptr(),
                                    col_t.data_ptr(), perm_t.data_ptr(), iperm_t.data_ptr()):
        return None
    return crow_t, col_t, perm_t, iperm_t


def se2_relative_log(g: Tensor, edge_index: Tensor, cut_below: Optional[float]) -> Optional[Tensor]:
    """``(E, 3)`` coordinates of ``log(g_i^-1 g_j)`` for ``g (N, 3, 3)`` float32 SE(2) elements
    and ``edge_index (2, E)`` (row 0 source ``j``, row 1 target ``i``); with ``cut_below``,
    angles below it move by ``+2 pi`` (:meth:`~pyg_lie.groups.SE2.one_sided_cut`). No gradient.
    ``None`` if an index is out of range or the inputs do not fit the kernel, for the caller's
    torch path and its error."""
    if (not usable(g, edge_index) or g.dtype != torch.float32 or g.dim() != 3 or g.shape[1:] != (3, 3)
            or edge_index.dim() != 2 or edge_index.shape[0] != 2):
        return None
    g = _plain(g.detach())
    src, dst = _i64(edge_index[0], edge_index[1])
    out = g.new_empty(src.numel(), 3)
    rc = _library().se2_relative_log_f32(g.shape[0], src.numel(), g.data_ptr(), src.data_ptr(), dst.data_ptr(),
                                         out.data_ptr(), cut_below is not None,
                                         0.0 if cut_below is None else cut_below, torch.get_num_threads())
    return None if rc else out


def radius_graph(pos: Tensor, ptr: Tensor, r: float, loop: bool) -> Optional[Tensor]:
    """``(2, E)`` edges (row 0 source ``j``, row 1 target ``i``, in ``(i, j)`` order) of the
    points ``pos (N, d)`` (``1 <= d <= 3``, finite, CPU) of the graphs ``ptr[b] .. ptr[b + 1] - 1``
    (``ptr (B + 1,)``, int64) within distance ``r`` of each other, by the float64 rule of
    :mod:`pyg_lie.neighbors`; with ``loop``, the self pairs too. ``None`` when out of memory,
    when the grid's candidate pairs exceed ``256 N + 2^25`` (clouds far denser in places than
    their bounding boxes), when ``ptr`` is not a pointer of the ``N`` points or the inputs
    cannot be read, for the caller's k-d tree."""
    if not usable(pos, ptr) or pos.dim() != 2 or not 1 <= pos.shape[1] <= 3 or not math.isfinite(r) or r < 0:
        return None
    pos = _plain(pos.detach(), torch.float64)
    ptr = _pointer_arg("ptr", ptr)
    N, d = pos.shape
    counts = ptr.new_empty(N)
    lib = _library()
    h = lib.radius_graph_build(N, d, pos.data_ptr(), ptr.numel() - 1, ptr.data_ptr(), r * r, r, int(loop),
                               counts.data_ptr(), torch.get_num_threads())
    if not h:
        return None
    rowptr = torch.zeros(N + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=rowptr[1:])
    out = ptr.new_empty(2, int(rowptr[-1]))
    lib.radius_graph_fill(h, rowptr.data_ptr(), out[0].data_ptr(), out[1].data_ptr(), torch.get_num_threads())
    return out


def segment_softmax_supported(*ts: Tensor) -> bool:
    """True if :func:`segment_softmax` takes these tensors: float32 on CPU."""
    return all(t.dtype == torch.float32 for t in ts) and usable(*ts)


def segment_softmax(s: Tensor, ptr: Tensor) -> Optional[Tensor]:
    """``(R, E)`` softmax of every row of ``s (R, E)`` (float32, CPU) over the segments
    ``ptr[i] .. ptr[i + 1] - 1`` (``ptr (N + 1,)``, from 0 to ``E``, non-decreasing). ``None``
    if ``ptr`` is not such a pointer, for the caller's torch path."""
    if not segment_softmax_supported(s) or s.dim() != 2:
        return None
    s, ptr = _plain(s), _pointer_arg("ptr", ptr)
    w = torch.empty_like(s)
    rc = _library().segment_softmax_f32(s.shape[0], ptr.numel() - 1, s.shape[1], s.data_ptr(), ptr.data_ptr(),
                                        w.data_ptr(), torch.get_num_threads())
    return None if rc else w


def segment_softmax_backward(g: Tensor, w: Tensor, ptr: Tensor) -> Optional[Tensor]:
    """``w * g - w * sum_seg(w * g)``, the gradient of :func:`segment_softmax` with respect to
    its scores for the output gradient ``g`` and the output ``w`` (both ``(R, E)``)."""
    if not segment_softmax_supported(g, w) or w.dim() != 2 or g.shape != w.shape:
        return None
    g, w, ptr = _plain(g), _plain(w), _pointer_arg("ptr", ptr)
    out = torch.empty_like(w)
    rc = _library().segment_softmax_backward_f32(w.shape[0], ptr.numel() - 1, w.shape[1], g.data_ptr(),
                                                 w.data_ptr(), ptr.data_ptr(), out.data_ptr(),
                                                 torch.get_num_threads())
    return None if rc else out
