"""Whether tensor values can be read right now: the one place that asks torch.

* :func:`tracing`: under ``torch.compile`` / ``torch.export`` or while a ``FakeTensorMode`` is
  active. Value checks and data-dependent branches take their traceable form (or step aside).
* :func:`compiling`: under ``torch.compile`` / ``torch.export`` only (the steps that must stay
  out of a compiled graph but run under a fake mode as in eager mode).
* :func:`fake_mode`: while a ``FakeTensorMode`` is active (nothing may reach C code).

This module imports nothing from the package, so every layer (``ops`` included) may use it.
"""
from __future__ import annotations

import torch

__all__ = ["tracing", "compiling", "fake_mode"]


def compiling() -> bool:
    """True under ``torch.compile`` / ``torch.export`` (:func:`torch.compiler.is_compiling`)."""
    return torch.compiler.is_compiling()


def fake_mode() -> bool:
    """True while a ``FakeTensorMode`` is active (tracing, ``torch.export``, ``make_fx``)."""
    try:
        return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None
    except AttributeError:  # a torch without the key
        return False


def tracing() -> bool:
    """True under ``torch.compile`` / ``torch.export`` and while a ``FakeTensorMode`` is active:
    no tensor values can be read (every data-dependent step must take its traceable form)."""
    return compiling() or fake_mode()
