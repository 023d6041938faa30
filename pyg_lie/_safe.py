"""Numerically safe scalar functions used by the closed-form exp/log maps (of the groups and of
the SE(2) relative-log operator of :mod:`pyg_lie.ops`, which both import them from here).

Each switches to a Taylor polynomial near its removable singularity and feeds a
harmless dummy value into the other branch, so neither values nor gradients
(first and second order) become NaN at the singular point.
"""
from __future__ import annotations

import torch
from torch import Tensor


def _small(x: Tensor) -> Tensor:
    eps = 1e-3 if x.dtype == torch.float64 else 3e-2
    return x.abs() < eps


def sinc(x: Tensor) -> Tensor:
    """``sin(x) / x``."""
    small = _small(x)
    xs = torch.where(small, torch.ones_like(x), x)
    x2 = x * x
    taylor = 1 - x2 / 6 + x2 * x2 / 120 - x2 * x2 * x2 / 5040
    return torch.where(small, taylor, torch.sin(xs) / xs)


def cosc(x: Tensor) -> Tensor:
    """``(1 - cos(x)) / x``."""
    small = _small(x)
    xs = torch.where(small, torch.ones_like(x), x)
    x2 = x * x
    taylor = x / 2 - x * x2 / 24 + x * x2 * x2 / 720 - x * x2 * x2 * x2 / 40320
    return torch.where(small, taylor, (1 - torch.cos(xs)) / xs)


def half_cot_half(x: Tensor) -> Tensor:
    """``(x / 2) cot(x / 2)``, finite on ``(-2 pi, 2 pi)``."""
    small = _small(x)
    xs = torch.where(small, torch.ones_like(x), x)
    x2 = x * x
    taylor = 1 - x2 / 12 - x2 * x2 / 720 - x2 * x2 * x2 / 30240
    return torch.where(small, taylor, (xs / 2) / torch.tan(xs / 2))
