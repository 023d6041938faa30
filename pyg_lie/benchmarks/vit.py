"""``pyg-lie bench vit``: equivariant ViTs (D4, C4) against plain ViTs (C1).

In one run: forward+backward wall time, parameter count and the multiply-adds of the
linear layers (patch embedding, q/k/v/o, MLP, head; counted from the Schur block
structure, i.e. what the block-wise implementation actually executes) of

* ``D4`` and ``C4`` models with token width ``|G| * channels``,
* the plain ViT (``C1``) of the same width, and
* the plain ViT with (about) the same parameter count as the D4 model.

The result goes to ``--out`` (default ``benchmarks/results/vit.json``, from which
``scripts/benchmarks_table.py`` writes the ViT section of ``docs/benchmarks.md``): one record
per model with its configuration and metrics, the command, the git revision and the class of
machine.

Example::

    pyg-lie bench vit                       # 32x32 images, patch 8, width 384, depth 2, batch 32
    pyg-lie bench vit --width 768 --depth 6 --batch 64 --device cuda --out runs/bench_vit.json
"""
from __future__ import annotations

import argparse
import time

import torch

from ..cli.types import device_name, nonnegative_int, positive_int

__all__ = ["add_arguments", "main", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--img-size", type=positive_int, default=32)
    p.add_argument("--patch-size", type=positive_int, default=8)
    p.add_argument("--width", type=positive_int, default=384, help="token dimension (multiple of 24)")
    p.add_argument("--depth", type=positive_int, default=2)
    p.add_argument("--heads", type=positive_int, default=3)
    p.add_argument("--batch", type=positive_int, default=32)
    p.add_argument("--reps", type=positive_int, default=7)
    p.add_argument("--threads", type=nonnegative_int, default=1,
                   help="torch threads (0: torch default; 1 is stable on shared CPUs)")
    p.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--out", default="benchmarks/results/vit.json", help="JSON file for the results")


def _model(group: str, channels: int, a):
    from ..models.equivariant_vit import EquivariantViT
    return EquivariantViT(group, "square", img_size=a.img_size, patch_size=a.patch_size, in_channels=3,
                          num_classes=10, depth=a.depth, heads=a.heads, channels=channels)


def _time_once(model, x) -> float:
    if x.is_cuda:
        torch.cuda.synchronize()
    t = time.perf_counter()
    model(x).sum().backward()
    if x.is_cuda:
        torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t


def _interleaved_medians(models, x, reps: int) -> list[float]:
    """Median fwd+bwd time of each model; models alternate within every repetition so
    that load from other processes affects all of them alike."""
    for m in models:  # warm-up
        _time_once(m, x)
    times = [[] for _ in models]
    for _ in range(reps):
        for i, m in enumerate(models):
            times[i].append(_time_once(m, x))
    return [sorted(t)[len(t) // 2] for t in times]


def run(a) -> list[dict]:
    if a.width % 24:
        raise ValueError(f"--width must be a multiple of 24 (|D4| * heads), got {a.width}")
    dev, dt = torch.device(a.device), getattr(torch, a.dtype)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.randn(a.batch, 3, a.img_size, a.img_size, device=dev, dtype=dt)
    configs = [("D4", a.width // 8, "D4"), ("C4", a.width // 4, "C4"), ("C1", a.width, "C1 same width")]
    d4_params = _model("D4", a.width // 8, a).count_parameters()
    best = min(range(a.heads, a.width + 1, a.heads),
               key=lambda c: abs(_model("C1", c, a).count_parameters() - d4_params))
    configs.append(("C1", best, "C1 same params"))
    rows, models = [], []
    for group, ch, label in configs:
        m = _model(group, ch, a).to(dev, dt).train()
        models.append(m)
        macs = m.macs_per_image()
        rows.append(dict(model=label, group=group, channels=ch, width=m.field_type.dim, params=m.count_parameters(),
                         linear_macs=macs["linear"], fourier_macs=macs["fourier"]))
    for r, t in zip(rows, _interleaved_medians(models, x, a.reps)):
        r["fwd_bwd_ms"] = 1000 * t
    ref = next(r for r in rows if r["model"] == "C1 same width")
    for r in rows:
        r["macs_ratio_vs_same_width"] = ref["linear_macs"] / r["linear_macs"]
        r["speedup_vs_same_width"] = ref["fwd_bwd_ms"] / r["fwd_bwd_ms"]
    return rows


def main(a) -> int:
    from ._record import write_benchmark

    rows = run(a)
    hdr = f"{'model':16s} {'width':>5s} {'params':>9s} {'lin MMACs/img':>13s} {'MAC ratio':>9s} {'fwd+bwd ms':>10s} {'speedup':>7s}"
    print(f"square {a.img_size}x{a.img_size}, patch {a.patch_size}, depth {a.depth}, heads {a.heads}, "
          f"batch {a.batch}, {a.device}, {a.dtype}, torch threads {torch.get_num_threads()}")
    print(hdr)
    for r in rows:
        print(f"{r['model']:16s} {r['width']:5d} {r['params']:9d} {r['linear_macs'] / 1e6:13.3f} "
              f"{r['macs_ratio_vs_same_width']:9.2f} {r['fwd_bwd_ms']:10.1f} {r['speedup_vs_same_width']:7.2f}")
    config = {k: v for k, v in vars(a).items() if not k.startswith("_") and k not in ("command", "task", "out")}
    config["torch_threads"] = torch.get_num_threads()
    shared = {k: config[k] for k in ("img_size", "patch_size", "depth", "heads", "batch", "device", "dtype")}
    records = [{"configuration": {"model": r["model"], "group": r["group"], "width": r["width"], **shared},
                "metrics": {k: r[k] for k in ("params", "linear_macs", "macs_ratio_vs_same_width", "fwd_bwd_ms",
                                              "speedup_vs_same_width")}} for r in rows]
    write_benchmark(a, ["bench", "vit"], a.out, benchmark="vit", title="Equivariant ViT against plain ViTs",
                    description="D4 and C4 ViTs (token width |G| x channels) against the plain ViT (C1) of the same "
                                "width and the plain ViT with about the D4 model's parameter count: parameters, "
                                "multiply-adds of the linear layers per image (linear_macs, from the Schur block "
                                "structure), their ratio to the same-width plain ViT, and the median forward + "
                                "backward time of a batch (fwd_bwd_ms; the models alternate within every "
                                "repetition) with its speed-up over the same-width plain ViT.",
                    config=config, seed=0, records=records)
    return 0
