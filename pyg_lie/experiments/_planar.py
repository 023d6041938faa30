"""Pieces shared by the constellation and lift-invariance experiments: random planar
motions of point clouds, a temporary lift swap and the error-vs-K plot style."""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, Optional

import torch
from torch import Tensor

__all__ = ["augment", "swapped_lift", "save_lift_plot"]


def augment(pos: Tensor, batch: Tensor, num_graphs: int, group: str, gen: Optional[torch.Generator] = None,
            translation_scale: float = 10.0) -> Tensor:
    """One random T2 / SE2 element per graph applied to ``pos``."""
    t = translation_scale * torch.randn(num_graphs, 2, generator=gen, dtype=torch.float64)
    th = (2 * math.pi * torch.rand(num_graphs, generator=gen, dtype=torch.float64)) if group == "SE2" \
        else torch.zeros(num_graphs, dtype=torch.float64)
    c, s = torch.cos(th), torch.sin(th)
    R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    p = (R[batch] @ pos.double().unsqueeze(-1)).squeeze(-1) + t[batch]
    return p.to(pos.dtype)


@contextlib.contextmanager
def swapped_lift(net: torch.nn.Module, num_samples: int, mode: str = "haar") -> Iterator[torch.nn.Module]:
    """Temporarily give a LieTransformer ``net`` a lift with ``num_samples`` samples (same seed)."""
    from ..nn.lift import Lift
    old = net.lift
    net.lift = Lift(net.group, num_samples, mode=mode, seed=old.seed).to(next(net.parameters()).device)
    try:
        yield net
    finally:
        net.lift = old


def save_lift_plot(fig, ax, path: str, ylabel: str, title: str) -> None:
    """Shared styling of the error-vs-K plots (log-log, base-2 K axis), saved to ``path``."""
    import matplotlib.pyplot as plt
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of lift samples K")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
