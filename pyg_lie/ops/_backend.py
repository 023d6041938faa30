"""Backend selection and dispatch counting for the operators of :mod:`pyg_lie.ops`."""
from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from typing import Dict, Iterator, Tuple

import torch

from .._tracing import compiling

__all__ = ["BACKENDS", "set_backend", "get_backend", "backend", "dispatch_counts", "reset_dispatch_counts",
           "triton_available", "native_available"]

#: the backends one can select; ``auto`` picks per device (see :func:`set_backend`)
BACKENDS = ("auto", "composite", "native", "triton")

_ENV = "PYG_LIE_BACKEND"
_lock = threading.Lock()
_counts: Counter = Counter()


def _checked(name) -> str:
    if not isinstance(name, str) or name.lower() not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {name!r}")
    return name.lower()


def _from_environment() -> str:
    value = os.environ.get(_ENV, "auto").strip() or "auto"
    try:
        return _checked(value)
    except ValueError as err:
        raise ValueError(f"environment variable {_ENV}: {err}") from None


#: the process-wide selection (set_backend, PYG_LIE_BACKEND); a ``with backend(...)`` block
#: overrides it in its own thread only
_default = _from_environment()
_local = threading.local()


def _selected() -> str:
    return getattr(_local, "name", None) or _default


def set_backend(name: str) -> None:
    """Select how the operators of :mod:`pyg_lie.ops` compute:

    * ``"auto"`` (default): on CPU the native C kernels where they take the inputs, else the
      composite implementation; on CUDA the Triton kernels where they take the inputs, else
      the composite implementation.
    * ``"composite"``: the pure-torch reference that defines every operator's semantics.
    * ``"native"``: the C kernels for CPU tensors where they apply (composite elsewhere).
    * ``"triton"``: the Triton kernels on every device; CPU tensors run exactly the kernels a
      GPU runs, under Triton's interpreter (slow: for tests). Inputs a kernel does not take
      fall back to the composite implementation, as :func:`dispatch_counts` shows.

    The environment variable ``PYG_LIE_BACKEND`` sets the backend at import. The selection
    is process-wide (every thread), except inside a :func:`backend` block, which overrides
    it in its own thread.
    """
    global _default
    _default = _checked(name)


def get_backend() -> str:
    """The backend in force in this thread: the innermost :func:`backend` block's, else the
    one selected by :func:`set_backend` (or ``PYG_LIE_BACKEND``)."""
    return _selected()


@contextlib.contextmanager
def backend(name: str) -> Iterator[str]:
    """Context manager: the operators called from this thread use backend ``name`` inside
    the ``with`` block (other threads keep theirs; blocks nest)."""
    new, old = _checked(name), getattr(_local, "name", None)
    _local.name = new
    try:
        yield new
    finally:
        _local.name = old


def dispatch_counts() -> Dict[Tuple[str, str], int]:
    """How often each operator ran on each backend since the last :func:`reset_dispatch_counts`:
    ``{(operator, backend): calls}``, for example ``{("csr_attention", "triton"): 2}``. A
    backward operator counts under its own name (``"csr_attention_backward"``). Besides the
    selectable backends, ``"chunked"`` counts the edge MLP's blocked torch kernels, which run
    on CPU where the native kernel declines the inputs."""
    with _lock:
        return dict(_counts)


def reset_dispatch_counts() -> None:
    """Set every count of :func:`dispatch_counts` back to zero."""
    with _lock:
        _counts.clear()


def _count(op: str, name: str) -> None:
    key = (op, name)
    with _lock:
        _counts[key] += 1


_triton_ok = None


def triton_available() -> bool:
    """True if Triton imports (it ships with torch's Linux wheels)."""
    global _triton_ok
    if _triton_ok is None:
        try:
            import triton  # noqa: F401
            import triton.language  # noqa: F401
            from triton.runtime.interpreter import InterpretedFunction  # noqa: F401
            _triton_ok = True
        except Exception:  # noqa: BLE001 - any import failure means "no Triton"
            _triton_ok = False
    return _triton_ok


def native_available() -> bool:
    """True if the native CPU kernels are built and enabled (``PYG_LIE_NATIVE`` is not ``0``);
    for reports: the operators choose their kernels themselves."""
    return _native_module().available()


def torch_path(x: torch.Tensor) -> bool:
    """True where the structure-level functions prefer torch formulations to the operators
    for work that torch does well at its own sizes: the ``auto`` backend on a tensor that is
    not on CUDA. There complete clouds run their attention as batched matrix products
    (:func:`pyg_lie.ops.csr_softmax_attention`) and small edge MLPs of other dtypes than
    float32 run as their modules (:func:`pyg_lie.ops.edge_mlp`)."""
    return x.device.type != "cuda" and _selected() == "auto"


def serves(x: torch.Tensor) -> bool:
    """True where the operators take every attention and edge MLP of the layers, at every
    size: CUDA tensors, or any tensor when a backend other than ``auto`` is in force (the
    opposite of :func:`torch_path`; for reports, the choice itself is made by the operators)."""
    return not torch_path(x)


def direct(*ts) -> bool:
    """True where an operator may call its implementation without the dispatcher (whose
    custom-operator machinery costs tens of microseconds a call, as much as a whole kernel on a
    small graph): eager mode on plain CPU or CUDA tensors, no ``torch.compile`` tracing, no
    dispatch mode (fake tensors, ``make_fx``), no functorch transform and no autocast (which
    the registered operators handle). The result is the same either way."""
    if compiling() or torch._C._len_torch_dispatch_stack():
        return False
    if torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
        return False
    return all(t is None or ((type(t) is torch.Tensor or type(t) is torch.nn.Parameter)
                             and t.device.type in ("cpu", "cuda")) for t in ts)


def call(op, impl, *args):
    """``op(*args)``, or its implementation ``impl(*args)`` where :func:`direct` allows."""
    return impl(*args) if direct(*(a for a in args if isinstance(a, torch.Tensor))) else op(*args)


_native = None


def _native_module():
    """:mod:`pyg_lie.ops._native`, the native CPU kernels (imported on first use)."""
    global _native
    if _native is None:
        from . import _native as module
        _native = module
    return _native


def choose(op: str, device: torch.device, native_ok, triton_ok, cpu_fallback: str = "composite") -> str:
    """The backend that runs ``op`` on ``device`` under the current selection, counted.
    ``native_ok`` / ``triton_ok``: callables saying whether those kernels take the inputs;
    ``cpu_fallback``: what runs on CPU where the native kernel declines them (``"chunked"``:
    the edge MLP's blocked torch kernels)."""
    sel = _selected()
    if sel == "auto":
        sel = "triton" if device.type == "cuda" else "native"
    if sel == "native" and not (device.type == "cpu" and native_ok()):
        sel = cpu_fallback if device.type == "cpu" else "composite"
    elif sel == "triton" and not (device.type in ("cpu", "cuda") and triton_available() and triton_ok()):
        sel = "composite"
    _count(op, sel)
    return sel
