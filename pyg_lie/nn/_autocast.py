"""The autocast rule of pyg_lie's custom operators (fused kernels)."""
from __future__ import annotations

import torch

__all__ = ["float32_under_autocast"]


def float32_under_autocast(*ops) -> None:
    """Under ``torch.autocast`` (CPU and CUDA) run ``ops`` in float32, as autocast runs its
    reductions (softmax, sums): floating inputs other than float64 are cast to float32 and
    autocast is off inside the operator.

    Autocast does not cast a custom operator's inputs by itself: the operator would receive
    half-precision projections beside float32 parameters, and autocast would still recast
    the aten calls inside it, some of which (torch's sparse CSR products on CPU) have no
    half-precision kernel."""
    for op in ops:
        for device in ("cpu", "cuda"):
            try:
                op.register_autocast(device, torch.float32)
            except ValueError:  # a build without that device's autocast
                pass
