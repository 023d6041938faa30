"""``argparse`` types for counts: a bad value is a usage error naming the option.

``--epochs 0`` or ``--repeats -1`` stop at parsing (``error: argument --epochs: must be a
positive integer, got '0'``, exit status 2) instead of failing later or running nothing.
"""
from __future__ import annotations

import argparse

__all__ = ["positive_int", "nonnegative_int"]


def _int(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int(text, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    return _int(text, 0, "an integer >= 0")


# argparse names the type in its messages by the function's __name__
positive_int.__name__ = "positive integer"
nonnegative_int.__name__ = "integer >= 0"
