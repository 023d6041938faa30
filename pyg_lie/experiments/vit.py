"""``pyg-lie train vit``: data-scarce classification with equivariant ViTs (paper Sec. 5).

Trains G-invariant ViT classifiers on randomly rotated images with 10%, 40% and 100% of
the training data, for ``D4, C4, D2, C1`` on the square grid and ``D6, C6, D3, C1`` on
the hexagonal grid, with parameter counts matched to the largest group's model, over
several seeds; optionally compares coupled and irrep-wise attention (``C4``, Table 1).
Writes ``results.json``, ``fig4_accuracy_vs_ratio.png`` and ``fig5_attention.png``.

Data (all offline):

* ``fashion-mnist``: the idx files of Debian's ``dataset-fashion-mnist`` package
  (``/usr/share/datasets/fashion-mnist``) or any folder given by ``--data-dir``;
* ``patternnet``: a local PatternNet folder (``--data-dir``, one sub-folder per class);
* ``synthetic``: rotated regular polygons (3-8 sides), generated on the fly;
* ``auto``: fashion-mnist if found, else synthetic.

Images are resized to ``--img-size``, rotated by a uniformly random angle (train and
test) and scaled to ``[-1, 1]``; the hexagonal models resample them bilinearly.

Short default (a few minutes on a CPU)::

    pyg-lie train vit

Full Figure 4 / Figure 5 run (hours on a CPU; minutes on a GPU)::

    pyg-lie train vit --grid both --groups all --ratios 0.1,0.4,1.0 --seeds 3 --epochs 40 \\
        --max-train 5000 --channels 6 --depth 4 --compare-attention --device cuda
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import time
from typing import List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..cli.types import device_name, nonnegative_float, nonnegative_int, positive_float, positive_int
from ..groups.finite import o2_group

__all__ = ["add_arguments", "main", "load_dataset", "rotate_images", "matched_channels"]

SQUARE = ("D4", "C4", "D2", "C1")
HEX = ("D6", "C6", "D3", "C1")
FMNIST_DIRS = ("/usr/share/datasets/fashion-mnist",)


def fraction_list(text: str) -> List[float]:
    """``--ratios``: comma-separated fractions of the training set, each in (0, 1]."""
    try:
        out = [float(r) for r in text.split(",")]
    except ValueError:
        out = []
    if not out or not all(0.0 < r <= 1.0 for r in out):
        raise argparse.ArgumentTypeError(f"must be comma-separated fractions in (0, 1] such as 0.1,1.0, "
                                         f"got {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="auto", choices=["auto", "fashion-mnist", "patternnet", "synthetic"])
    p.add_argument("--data-dir", default=None, help="folder with the data set files")
    p.add_argument("--grid", default="square", choices=["square", "hex", "both"])
    p.add_argument("--groups", default=None, help="comma list (default: D4,C1 square / D6,C1 hex; "
                   "'all' for D4,C4,D2,C1 / D6,C6,D3,C1)")
    p.add_argument("--ratios", type=fraction_list, default=[0.1, 1.0],
                   help="comma list of training-set fractions in (0, 1]")
    p.add_argument("--seeds", type=positive_int, default=1)
    p.add_argument("--epochs", type=positive_int, default=10,
                   help="epochs at ratio 1; ratio r trains epochs/r (<= 10x)")
    p.add_argument("--max-train", type=positive_int, default=5000,
                   help="size of the full (100%%) training set (1000 images gave, at 10%%, seed-to-seed "
                        "spreads as large as the D4-C1 gap)")
    p.add_argument("--n-val", type=positive_int, default=1000, help="validation images (checkpoint selection; was 300)")
    p.add_argument("--n-test", type=positive_int, default=1000)
    p.add_argument("--img-size", type=positive_int, default=16)
    p.add_argument("--patch-size", type=positive_int, default=4, help="square patch side")
    p.add_argument("--hex-patch-side", type=positive_int, default=3, help="N2: pixels per hexagonal patch side")
    p.add_argument("--hex-patches-side", type=positive_int, default=3, help="N1: patches per side")
    p.add_argument("--depth", type=positive_int, default=2)
    p.add_argument("--heads", type=positive_int, default=3)
    p.add_argument("--channels", type=positive_int, default=6,
                   help="copies of the regular rep for the largest group; others matched in parameters")
    p.add_argument("--attention", default="coupled", choices=["coupled", "irrepwise"])
    p.add_argument("--compare-attention", action="store_true", help="also run Fig. 5 (C4, coupled vs irrepwise)")
    p.add_argument("--mlp-gset", default="regular")
    p.add_argument("--mlp-ratio", type=positive_float, default=1.0)
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--evals", type=positive_int, default=10, help="validations per run (early-stopping checkpoints)")
    p.add_argument("--lr", type=nonnegative_float, default=3e-3)
    p.add_argument("--weight-decay", type=nonnegative_float, default=0.05)
    p.add_argument("--break-symmetry", default=None,
                   help="e.g. 'C4@0.5': restrict every model to this subgroup after that fraction of the epochs "
                        "(model.restrict, Theorem 2); models whose group does not contain it keep their group")
    p.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--threads", type=nonnegative_int, default=1)
    p.add_argument("--out", default="runs/vit")
    p.add_argument("--no-progress", action="store_true", help="disable the tqdm bars")
    from .results import add_result_arguments
    add_result_arguments(p, "DATASET-GRID, e.g. fashion-mnist-square")


# ----------------------------------------------------------------------- data
def _read_idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _find_fmnist(data_dir: Optional[str]) -> Optional[str]:
    for d in ([data_dir] if data_dir else []) + list(FMNIST_DIRS):
        for name in ("train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"):
            if d and os.path.exists(os.path.join(d, name)):
                return d
    return None


def _load_fmnist(d: str):
    def get(stem):
        for ext in (".gz", ""):
            path = os.path.join(d, stem + ext)
            if os.path.exists(path):
                return _read_idx(path)
        raise FileNotFoundError(os.path.join(d, stem))
    xtr, ytr = get("train-images-idx3-ubyte"), get("train-labels-idx1-ubyte")
    xte, yte = get("t10k-images-idx3-ubyte"), get("t10k-labels-idx1-ubyte")
    x = torch.as_tensor(np.concatenate([xtr, xte]), dtype=torch.float32)[:, None] / 255.0
    y = torch.as_tensor(np.concatenate([ytr, yte]).astype(np.int64))
    return x, y, 10


def _load_patternnet(d: str, size: int):
    import matplotlib.image as mpimg
    classes = sorted(c for c in os.listdir(d) if os.path.isdir(os.path.join(d, c)))
    xs, ys = [], []
    for i, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(d, c))):
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                im = torch.as_tensor(np.asarray(mpimg.imread(os.path.join(d, c, f))), dtype=torch.float32)
                im = im[..., :3].permute(2, 0, 1)[None]
                im = im / 255.0 if im.max() > 1.5 else im
                xs.append(F.interpolate(im, size=(size, size), mode="bilinear", antialias=True, align_corners=False))
                ys.append(i)
    if not xs:
        raise FileNotFoundError(f"--data-dir: no PatternNet images found under {d}")
    return torch.cat(xs), torch.as_tensor(ys), len(classes)


def _synthetic(n: int, size: int, seed: int):
    """Regular polygons with 3..8 sides, random radius/rotation/offset, plus noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 6, (n,), generator=g)
    k = (y + 3).double()[:, None, None]
    lin = torch.linspace(-1, 1, size, dtype=torch.float64)
    yy, xx = torch.meshgrid(lin, lin, indexing="ij")
    R = 0.45 + 0.35 * torch.rand(n, 1, 1, generator=g, dtype=torch.float64)
    c = 0.1 * (torch.rand(n, 2, 1, 1, generator=g, dtype=torch.float64) - 0.5)
    th = torch.atan2(yy - c[:, 1], xx - c[:, 0])
    r = torch.sqrt((xx - c[:, 0]) ** 2 + (yy - c[:, 1]) ** 2)
    edge = R * torch.cos(math.pi / k) / torch.cos((th % (2 * math.pi / k)) - math.pi / k)
    img = torch.sigmoid((edge - r) * size * 1.5)
    img = img + 0.1 * torch.randn(img.shape, generator=g, dtype=torch.float64)
    return img[:, None].float(), y, 6


def rotate_images(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate ``(B, C, S, S)`` images by ``angles`` (radians, counter-clockwise), bilinear."""
    c, s = torch.cos(angles), torch.sin(angles)
    theta = torch.stack([torch.stack([c, -s, torch.zeros_like(c)], -1),
                         torch.stack([s, c, torch.zeros_like(c)], -1)], 1).to(x.dtype)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def load_dataset(a, seed: int = 0):
    """``(x_train, y_train, x_val, y_val, x_test, y_test, num_classes, name)``, rotated, in [-1, 1]."""
    name = a.dataset
    n_total = a.max_train + a.n_val + a.n_test
    if name in ("auto", "fashion-mnist"):
        d = _find_fmnist(a.data_dir)
        if d is None and name == "fashion-mnist":
            raise FileNotFoundError("--data-dir: Fashion-MNIST idx files not found (apt-get install "
                                    "dataset-fashion-mnist, or pass the folder)")
        name = "fashion-mnist" if d else "synthetic"
    if name == "fashion-mnist":
        x, y, nc = _load_fmnist(d)
        g = torch.Generator().manual_seed(1234)
        idx = torch.randperm(len(x), generator=g)[:n_total]
        x, y = x[idx], y[idx]
        x = F.interpolate(x, size=(a.img_size, a.img_size), mode="bilinear", antialias=True, align_corners=False)
    elif name == "patternnet":
        if not a.data_dir:
            raise ValueError("--data-dir: PatternNet needs the local folder of class sub-folders")
        x, y, nc = _load_patternnet(a.data_dir, a.img_size)
        g = torch.Generator().manual_seed(1234)
        idx = torch.randperm(len(x), generator=g)[:n_total]
        x, y = x[idx], y[idx]
    else:
        x, y, nc = _synthetic(n_total, a.img_size, 1234)
        name = "synthetic"
    g = torch.Generator().manual_seed(4321)
    x = rotate_images(x, 2 * math.pi * torch.rand(len(x), generator=g))
    lo, hi = x.amin(dim=(1, 2, 3), keepdim=True), x.amax(dim=(1, 2, 3), keepdim=True)
    x = 2 * (x - lo) / (hi - lo).clamp_min(1e-6) - 1
    ntr, nv = min(a.max_train, len(x) - a.n_val - a.n_test), a.n_val
    return (x[:ntr], y[:ntr], x[ntr:ntr + nv], y[ntr:ntr + nv], x[ntr + nv:ntr + nv + a.n_test],
            y[ntr + nv:ntr + nv + a.n_test], nc, name)


# --------------------------------------------------------------------- models
def _build(group: str, grid: str, channels: int, in_ch: int, nc: int, a, attention: Optional[str] = None,
           irrep_heads=None, heads: Optional[int] = None):
    from ..models.equivariant_vit import EquivariantViT
    mlp = a.mlp_gset if (a.mlp_gset != "quotients" or group.startswith("D") and group != "D1") else "regular"
    return EquivariantViT(group, grid, img_size=a.img_size,
                          patch_size=a.patch_size if grid == "square" else a.hex_patch_side,
                          patches_side=a.hex_patches_side, in_channels=in_ch, num_classes=nc, depth=a.depth,
                          heads=heads or a.heads, channels=channels, attention=attention or a.attention,
                          irrep_heads=irrep_heads, mlp_gset=mlp, mlp_ratio=a.mlp_ratio, attn_dropout=0.1,
                          drop_path=0.05, head_dropout=0.1)


def matched_channels(group: str, grid: str, target: int, in_ch: int, nc: int, a, max_channels: int = 400) -> int:
    """Copies of the regular representation (a multiple of ``heads``) whose model has the
    parameter count closest to ``target``."""
    best, best_gap = a.heads, None
    c = a.heads
    while c <= max_channels:
        n = _build(group, grid, c, in_ch, nc, a).count_parameters()
        gap = abs(n - target)
        if best_gap is None or gap < best_gap:
            best, best_gap = c, gap
        if n > target:
            break
        c += a.heads
    return best


def _evaluate(model, x, y, bs: int, dev) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), bs):
            correct += (model(x[i:i + bs].to(dev)).argmax(-1).cpu() == y[i:i + bs]).sum().item()
    return correct / max(1, len(x))


def _is_proper_subgroup(name: str, G) -> bool:
    H = o2_group(name)
    return H != G and G.n % H.n == 0 and (G.dihedral or not H.dihedral)


def _parse_break(spec: Optional[str], epochs: int):
    """``"C4@0.5"`` -> ``(epoch, "C4")``: restrict to C4 after half of the epochs."""
    if not spec:
        return None
    try:
        grp, frac = spec.split("@")
        return int(round(float(frac) * epochs)), grp.strip().upper()
    except ValueError:
        raise ValueError(f"--break-symmetry: expected GROUP@FRACTION such as 'C4@0.5', got {spec!r}") from None


def train_one(model, data, ratio: float, seed: int, a, desc: str) -> dict:
    from tqdm import tqdm
    xtr, ytr, xv, yv, xte, yte = data
    g = torch.Generator().manual_seed(seed)
    n = max(1, int(round(ratio * len(xtr))))
    sub = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(99))[:n]  # same subset for every seed
    xtr, ytr = xtr[sub], ytr[sub]
    dev = torch.device(a.device)
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    epochs = max(1, int(round(a.epochs / max(ratio, 0.1))))
    steps = epochs * math.ceil(n / a.batch_size)
    warm = max(1, steps // 10)
    lr_at = lambda t: a.lr * min(1.0, (t + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, t / steps)))
    brk = _parse_break(getattr(a, "break_symmetry", None), epochs)
    best = (-1.0, 0.0, 0)
    t0 = time.time()
    step = 0
    every = max(1, epochs // a.evals)  # validation (and test at the best validation) ~a.evals times per run
    bar = tqdm(range(epochs), desc=desc, leave=False, mininterval=5.0, disable=a.no_progress)
    for ep in bar:
        if brk is not None and ep == brk[0] and _is_proper_subgroup(brk[1], model.group):
            # gradual symmetry breaking (Theorem 2): same function, smaller group, fresh optimizer
            model = model.restrict(brk[1]).train()
            opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
        model.train()
        perm = torch.randperm(n, generator=g)
        for i in range(0, n, a.batch_size):
            b = perm[i:i + a.batch_size]
            for pg in opt.param_groups:
                pg["lr"] = lr_at(step)
            loss = F.cross_entropy(model(xtr[b].to(dev)), ytr[b].to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        if (ep + 1) % every and ep + 1 != epochs:
            continue
        val = _evaluate(model, xv, yv, 256, dev)
        if val > best[0]:
            best = (val, _evaluate(model, xte, yte, 256, dev), ep)
        bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{val:.3f}")
    return dict(val_acc=best[0], test_acc=best[1], best_epoch=best[2], epochs=epochs, n_train=n,
                final_group=model.group.name,
                seconds=time.time() - t0)


# ---------------------------------------------------------------------- plots
def _plots(results: list[dict], out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main_runs = [r for r in results if r["experiment"] == "fig4"]
    grids = sorted({r["grid"] for r in main_runs})
    if grids:
        fig, axes = plt.subplots(1, len(grids), figsize=(5 * len(grids), 4), squeeze=False)
        for ax, grid in zip(axes[0], grids):
            for group in dict.fromkeys(r["group"] for r in main_runs if r["grid"] == grid):
                rs = [r for r in main_runs if r["grid"] == grid and r["group"] == group]
                ratios = sorted({r["ratio"] for r in rs})
                m = [np.mean([r["test_acc"] for r in rs if r["ratio"] == q]) for q in ratios]
                s = [np.std([r["test_acc"] for r in rs if r["ratio"] == q]) for q in ratios]
                ax.errorbar(ratios, m, yerr=s, marker="o", capsize=3, label=f"{group} ({rs[0]['params']} p.)")
            ax.set_xscale("log")
            ax.set_xlabel("sample ratio")
            ax.set_ylabel("test accuracy")
            ax.set_title(f"{grid} grid")
            ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "fig4_accuracy_vs_ratio.png"), dpi=120)
        plt.close(fig)
    att = [r for r in results if r["experiment"] == "fig5"]
    if att:
        fig, ax = plt.subplots(figsize=(5, 4))
        for kind in ("coupled", "irrepwise"):
            rs = [r for r in att if r["attention"] == kind]
            ratios = sorted({r["ratio"] for r in rs})
            m = [np.mean([r["test_acc"] for r in rs if r["ratio"] == q]) for q in ratios]
            s = [np.std([r["test_acc"] for r in rs if r["ratio"] == q]) for q in ratios]
            ax.errorbar(ratios, m, yerr=s, marker="o", capsize=3, label=kind)
        ax.set_xscale("log")
        ax.set_xlabel("sample ratio")
        ax.set_ylabel("test accuracy")
        ax.set_title("C4: coupled vs irrep-wise attention")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "fig5_attention.png"), dpi=120)
        plt.close(fig)


def _summary(results: list[dict]) -> list[str]:
    lines = []
    keys = dict.fromkeys((r["experiment"], r["grid"], r["group"], r["attention"], r["ratio"]) for r in results)
    for exp, grid, group, att, ratio in keys:
        acc = [r["test_acc"] for r in results if (r["experiment"], r["grid"], r["group"], r["attention"], r["ratio"])
               == (exp, grid, group, att, ratio)]
        p = next(r["params"] for r in results if r["group"] == group and r["grid"] == grid and r["experiment"] == exp)
        lines.append(f"{exp} {grid:6s} {group:3s} {att:9s} ratio {ratio:4.2f}  params {p:7d}  test acc "
                     f"{100 * np.mean(acc):5.1f} +- {100 * np.std(acc):4.1f} %  (n={len(acc)})")
    # gap to the plain ViT (C1) of the same grid and ratio: difference of means vs combined std
    for exp, grid, group, att, ratio in keys:
        if exp != "fig4" or group == "C1":
            continue
        acc = [r["test_acc"] for r in results if (r["experiment"], r["grid"], r["group"], r["attention"],
                                                  r["ratio"]) == (exp, grid, group, att, ratio)]
        ref = [r["test_acc"] for r in results if (r["experiment"], r["grid"], r["group"], r["ratio"])
               == (exp, grid, "C1", ratio)]
        if len(acc) and len(ref):
            gap = 100 * (np.mean(acc) - np.mean(ref))
            comb = 100 * math.sqrt(np.std(acc) ** 2 + np.std(ref) ** 2)
            lines.append(f"{exp} {grid:6s} {group:3s} - C1 ratio {ratio:4.2f}: {gap:+5.1f} points "
                         f"(combined std {comb:4.1f}, gap/std {gap / max(comb, 1e-9):5.1f})")
    return lines


def main(a) -> int:
    from ..training import require_single_process
    require_single_process("vit")
    if a.threads:
        torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    xtr, ytr, xv, yv, xte, yte, nc, dname = load_dataset(a)
    data = (xtr, ytr, xv, yv, xte, yte)
    in_ch = xtr.shape[1]
    ratios = a.ratios
    print(f"data: {dname}, train {len(xtr)}, val {len(xv)}, test {len(xte)}, {nc} classes, "
          f"{a.img_size}x{a.img_size}x{in_ch}, random rotations")
    grids = ["square", "hex"] if a.grid == "both" else [a.grid]
    jobs = []  # (experiment, grid, group, attention, irrep_heads, heads, channels)
    for grid in grids:
        full = SQUARE if grid == "square" else HEX
        if a.groups in (None, ""):
            groups = (full[0], "C1")
        elif a.groups == "all":
            groups = full
        else:
            groups = tuple(s.strip() for s in a.groups.split(","))
        target = _build(groups[0], grid, a.channels, in_ch, nc, a).count_parameters()
        for grp in groups:
            ch = a.channels if grp == groups[0] else matched_channels(grp, grid, target, in_ch, nc, a)
            jobs.append(("fig4", grid, grp, a.attention, None, a.heads, ch))
    if a.compare_attention:  # Table 1: C4, 4q copies, 4 heads of 4q features each
        q = max(1, a.channels // 3)
        jobs.append(("fig5", "square", "C4", "coupled", None, 4, 4 * q))
        jobs.append(("fig5", "square", "C4", "irrepwise", {"A": 1, "B": 1, "E1": 2}, 4, 4 * q))
    results = []
    for exp, grid, grp, att, ih, heads, ch in jobs:
        for ratio in ratios if exp == "fig4" else [r for r in ratios if r in (min(ratios), max(ratios))]:
            for seed in range(a.seeds):
                torch.manual_seed(seed)
                model = _build(grp, grid, ch, in_ch, nc, a, att, ih, heads)
                res = train_one(model, data, ratio, seed, a, f"{exp} {grid} {grp} {att} r={ratio} s={seed}")
                res.update(experiment=exp, grid=grid, group=grp, attention=att, ratio=ratio, seed=seed, channels=ch,
                           params=model.count_parameters(), dataset=dname)
                results.append(res)
                print(f"{exp} {grid:6s} {grp:3s} {att:9s} ch={ch:3d} params={res['params']:7d} ratio={ratio:4.2f} "
                      f"seed={seed}  test acc {100 * res['test_acc']:5.1f}%  ({res['seconds']:.0f}s)", flush=True)
                with open(os.path.join(a.out, "results.json"), "w") as f:
                    json.dump({"args": vars(a), "results": results}, f, indent=1, default=str)
    _plots(results, a.out)
    print("\n".join(_summary(results)))
    print(f"wrote {a.out}/results.json and plots")
    _record(a, results, dname, nc, time.time() - t0)
    return 0


#: Table 4 (Appendix F) and the data of the paper's experiments
PAPER_SETTING = {"dataset": "patternnet", "img_size": 256, "patch_size": 16, "depth": 6, "heads": 3, "lr": 1e-3,
                 "weight_decay": 0.05}


def _record(a, results: list[dict], dname: str, nc: int, seconds: float) -> None:
    """``results/vit/<run>.json``: test accuracy (mean and std over seeds) per figure, grid, group,
    attention and ratio; the paper gives figures only, no numbers."""
    from .results import record_run, setting_text
    metrics = {"chance": 1.0 / nc}
    keys = dict.fromkeys((r["experiment"], r["grid"], r["group"], r["attention"], r["ratio"]) for r in results)
    for exp, grid, group, att, ratio in keys:
        acc = [r["test_acc"] for r in results
               if (r["experiment"], r["grid"], r["group"], r["attention"], r["ratio"]) == (exp, grid, group, att, ratio)]
        name = f"{exp}.{grid}.{group}" + (f".{att}" if exp == "fig5" else "") + f".ratio{ratio:g}"
        metrics[name + ".test_acc"] = float(np.mean(acc))
        if len(acc) > 1:
            metrics[name + ".test_acc_std"] = float(np.std(acc))
    notes = ["no paper numbers (figures only)",
             f"{a.seeds} seed(s), {a.max_train} training images at ratio 1, {a.epochs} epochs at ratio 1, "
             f"best of {a.evals} validations (the paper: early stopping)"]
    setting = setting_text({**vars(a), "dataset": dname}, PAPER_SETTING, notes)
    plots = [os.path.join(a.out, n) for n in ("fig4_accuracy_vs_ratio.png", "fig5_attention.png")]
    record_run(a, "vit", f"{dname}-{a.grid}", ["train", "vit"], metrics=metrics, paper={}, setting=setting,
               wall_time_s=seconds, seed=list(range(a.seeds)), plots=plots)
