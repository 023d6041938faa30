r"""Rank-0 metric logging: CSV always, TensorBoard when installed, and a learning-curve plot.

Every call on a non-zero rank is a no-op, so training code can log
unconditionally.  The CSV (``metrics.csv``) has one row per :meth:`MetricsLogger.log`
call; new keys add columns. The file is rewritten whole after every row, atomically (a temporary
file in its folder renamed over it), so that a run killed at any moment leaves a complete file.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Dict, List, Optional, Sequence

from ._atomic import atomic_open
from .ddp import DistEnv

__all__ = ["MetricsLogger", "read_metrics", "plot_learning_curves"]


class MetricsLogger:
    """Append metric rows to ``out_dir/metrics.csv`` (and TensorBoard) on rank 0.

    Args:
        out_dir: output folder (created).
        env: the distributed environment; other ranks log nothing.
        tensorboard: also write TensorBoard events to ``out_dir/tb`` when
            ``torch.utils.tensorboard`` can be imported.
        resume: keep existing rows (when resuming) instead of starting a new file.
    """

    def __init__(self, out_dir: str, env: DistEnv, tensorboard: bool = True, resume: bool = False) -> None:
        self.env = env
        self.path = os.path.join(out_dir, "metrics.csv")
        self.rows: List[Dict[str, float]] = []
        self.writer = None
        if not env.is_main:
            return
        os.makedirs(out_dir, exist_ok=True)
        if resume and os.path.isfile(self.path):
            self.rows = read_metrics(self.path)
        elif os.path.isfile(self.path):
            os.remove(self.path)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.writer = SummaryWriter(os.path.join(out_dir, "tb"))
            except Exception:  # tensorboard not installed
                self.writer = None

    def truncate(self, max_epoch: int) -> None:
        """Drop rows with ``epoch > max_epoch`` (rows written after the checkpoint being resumed)."""
        if self.env.is_main:
            self.rows = [r for r in self.rows if float(r.get("epoch", -1)) <= max_epoch]
            self._rewrite()

    def log(self, row: Dict[str, float], step: Optional[int] = None) -> None:
        """Record one row of scalars (e.g. ``{"epoch": 3, "train_loss": 0.1}``)."""
        if not self.env.is_main:
            return
        row = {k: float(v) for k, v in row.items()}
        self.rows.append(row)
        self._rewrite()  # the whole file, atomically: an append killed midway would leave half a row
        if self.writer is not None:
            s = int(step if step is not None else row.get("epoch", len(self.rows)))
            for k, v in row.items():
                if k != "epoch" and math.isfinite(v):
                    self.writer.add_scalar(k, v, s)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def _keys(self) -> List[str]:
        keys: List[str] = []
        for r in self.rows:
            keys += [k for k in r if k not in keys]
        return keys

    def _rewrite(self) -> None:
        keys = self._keys()
        with atomic_open(self.path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            for r in self.rows:
                w.writerow(r)


def read_metrics(path: str) -> List[Dict[str, float]]:
    """Rows of a ``metrics.csv`` as dicts of floats (empty cells are skipped)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    try:
        return [{k: float(v) for k, v in r.items() if v not in ("", None) and k is not None} for r in rows]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path!r} is not a metrics file written by MetricsLogger (a cell that is no number: "
                         f"{err}); move it away to start its history anew") from None


def plot_learning_curves(csv_path: str, png_path: str, keys: Optional[Sequence[str]] = None,
                         title: str = "learning curves", logy: bool = True) -> Optional[str]:
    """Plot metric columns against ``epoch`` (log scale) and save a PNG; returns the path.

    Args:
        csv_path: a ``metrics.csv`` written by :class:`MetricsLogger`.
        png_path: output image.
        keys: columns to plot (default: every column except ``epoch``, ``lr`` and ``time``).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(csv_path)
    if not rows:
        return None
    if keys is None:
        keys = []
        for r in rows:
            keys += [k for k in r if k not in keys and k not in ("epoch", "lr", "time", "step")]
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in keys:
        pts = [(r["epoch"], r[k]) for r in rows if k in r and "epoch" in r]
        if logy:
            pts = [(e, v) for e, v in pts if v > 0]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=k)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return png_path
