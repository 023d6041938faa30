"""``argparse`` types for counts: a bad value is a usage error naming the option.

``--epochs 0`` or ``--repeats -1`` stop at parsing (``error: argument --epochs: must be a
positive integer, got '0'``, exit status 2) instead of failing later or running nothing.
"""
from __future__ import annotations

import argparse

from .. import _checks

__all__ = ["positive_int", "nonnegative_int"]


def _parse(text: str, check, what: str) -> int:
    """``check`` (the library's own integer check) on ``int(text)``, as an argparse error."""
    try:
        return check("value", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _parse(text, _checks.positive_int, "a positive integer")


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    return _parse(text, _checks.nonnegative_int, "an integer >= 0")


# argparse names the type in its messages by the function's __name__
positive_int.__name__ = "positive integer"
nonnegative_int.__name__ = "integer >= 0"
