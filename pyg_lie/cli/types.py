"""``argparse`` types: a bad value is a usage error naming the option.

``--epochs 0`` or ``--repeats -1`` stop at parsing (``error: argument --epochs: must be a
positive integer, got '0'``, exit status 2) instead of failing later or running nothing, and
so do ``--lr nan``, ``--dt-hours 0``, ``--device gpu`` and ``--device cuda`` on a machine
without CUDA.
"""
from __future__ import annotations

import argparse

from .. import _checks

__all__ = ["positive_int", "nonnegative_int", "positive_float", "nonnegative_float", "device_name"]


def _parse(text: str, check, what: str, convert=int):
    """``check`` (the library's own check) on ``convert(text)``, as an argparse error."""
    try:
        return check("value", convert(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _parse(text, _checks.positive_int, "a positive integer")


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    return _parse(text, _checks.nonnegative_int, "an integer >= 0")


def positive_float(text: str) -> float:
    """A finite number > 0 (a learning rate, a radius, a time step)."""
    return _parse(text, _checks.positive_float, "a finite number > 0", float)


def nonnegative_float(text: str) -> float:
    """A finite number >= 0 (a weight decay, a loss weight)."""
    return _parse(text, _checks.nonnegative_float, "a finite number >= 0", float)


def device_name(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``, where that CUDA device exists; returned as given (for
    ``torch.device``)."""
    kind, colon, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (colon and (kind == "cpu" or not index.isdigit())):
        raise argparse.ArgumentTypeError(f"must be 'cpu', 'cuda' or 'cuda:N', got {text!r}")
    if kind == "cuda":
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(f"{text!r}: CUDA is not available on this machine; use cpu")
        if index and int(index) >= count:
            raise argparse.ArgumentTypeError(f"{text!r}: this machine has {count} CUDA device(s), "
                                             f"cuda:0 .. cuda:{count - 1}")
    return text


# argparse names the type in its messages by the function's __name__
positive_int.__name__ = "positive integer"
nonnegative_int.__name__ = "integer >= 0"
positive_float.__name__ = "number > 0"
nonnegative_float.__name__ = "number >= 0"
