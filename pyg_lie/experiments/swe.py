r"""``pyg-lie train swe``: S^2 neighbourhood attention on shallow-water one-step prediction.

Data: ``torch_harmonics.examples.PdeDataset`` (spectral shallow-water solver,
random initial conditions, geopotential height / vorticity / divergence on an
equiangular grid, normalised per channel), generated on the fly once at start
and kept fixed: ``--n-train`` training pairs and ``--n-val`` validation pairs
``(u(t), u(t + dt))`` with ``dt = --dt-hours`` hours.

Model (identical for both backends): 1x1 encoder ``3 -> C``, ``--blocks`` residual
blocks ``x + Attn(LN(x))``, ``x + MLP(LN(x))`` (pointwise LayerNorm over channels,
1x1 MLP), 1x1 decoder ``C -> 3``, and the prediction ``u(t) + decoder(...)``.
``Attn`` is :class:`pyg_lie.nn.S2NeighborhoodAttention` ("pyg-lie") or
``torch_harmonics.NeighborhoodAttentionS2`` ("torch-harmonics"); both networks
start from the same weights (identical parameter names) and see the same
batches, so their curves should coincide up to float rounding.

Loss: quadrature-weighted mean squared error on the sphere,
``sum_t w_t / (4 pi) mean_{c, lon} (y - y_hat)^2`` with the grid's quadrature
weights. Outputs under ``--out``: ``maps.png`` (input, both predictions, target,
error for one validation sample), ``learning_curves.png``, ``summary.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from typing import Dict, List

import torch
from torch import Tensor, nn

from ..cli.types import device_name, nonnegative_float, nonnegative_int, positive_float, positive_int


BACKENDS = ("pyg-lie", "torch-harmonics")


def backend_list(text: str) -> List[str]:
    """``--backends``: comma-separated names from :data:`BACKENDS`, at least one, each once."""
    names = [b.strip() for b in text.split(",") if b.strip()]
    bad = [b for b in names if b not in BACKENDS]
    if not names or bad or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"must be one or both of {', '.join(BACKENDS)}, comma separated, "
                                         f"got {text!r}")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nlat", type=positive_int, default=32)
    p.add_argument("--nlon", type=positive_int, default=64)
    p.add_argument("--n-train", type=positive_int, default=32, help="training pairs generated at start")
    p.add_argument("--n-val", type=positive_int, default=8, help="validation pairs")
    p.add_argument("--dt-hours", type=positive_float, default=1.0, help="prediction step in hours")
    p.add_argument("--epochs", type=positive_int, default=12)
    p.add_argument("--batch-size", type=positive_int, default=8)
    p.add_argument("--lr", type=nonnegative_float, default=3e-3)
    p.add_argument("--channels", type=positive_int, default=16)
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument("--blocks", type=positive_int, default=2)
    p.add_argument("--backends", type=backend_list, default=list(BACKENDS),
                   help="comma separated: pyg-lie and/or torch-harmonics")
    p.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--threads", type=nonnegative_int, default=0,
                   help="torch intra-op threads (0: torch's default)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--out", default="runs/swe", help="output folder for maps, curves and summary.json")
    p.add_argument("--no-progress", action="store_true", help="disable the tqdm bars")
    from .results import add_result_arguments
    add_result_arguments(p, "NLATxNLON, e.g. 32x64")


# ------------------------------------------------------------------------------ model
class ChannelNorm(nn.Module):
    """LayerNorm over channels at every grid point (pointwise, hence rotation equivariant)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: Tensor) -> Tensor:  # (B, C, H, W)
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class AttentionBlock(nn.Module):
    def __init__(self, attn: nn.Module, channels: int) -> None:
        super().__init__()
        self.norm1, self.attn = ChannelNorm(channels), attn
        self.norm2 = ChannelNorm(channels)
        self.mlp = nn.Sequential(nn.Conv2d(channels, 2 * channels, 1), nn.GELU(), nn.Conv2d(2 * channels, channels, 1))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class S2AttentionNet(nn.Module):
    """Small residual S^2 attention network for one-step prediction, ``(B, 3, H, W) -> (B, 3, H, W)``."""

    def __init__(self, backend: str, shape, channels: int = 16, heads: int = 4, blocks: int = 2,
                 in_channels: int = 3) -> None:
        super().__init__()
        if backend == "pyg-lie":
            from pyg_lie.nn import S2NeighborhoodAttention as Attn
        elif backend == "torch-harmonics":
            from torch_harmonics import NeighborhoodAttentionS2 as Attn
        else:
            raise ValueError(f"backend must be 'pyg-lie' or 'torch-harmonics', got {backend!r}")
        self.encoder = nn.Conv2d(in_channels, channels, 1)
        self.blocks = nn.ModuleList(
            [AttentionBlock(Attn(channels, shape, shape, num_heads=heads), channels) for _ in range(blocks)])
        self.decoder = nn.Conv2d(channels, in_channels, 1)

    def forward(self, u: Tensor) -> Tensor:
        x = self.encoder(u)
        for blk in self.blocks:
            x = blk(x)
        return u + self.decoder(x)


# ------------------------------------------------------------------------------ data and loss
def make_data(nlat: int, nlon: int, n_train: int, n_val: int, dt_hours: float, device, seed: int,
              progress: bool = True):
    """Generate ``(inputs, targets)`` tensors ``(n, 3, nlat, nlon)`` with torch-harmonics' solver."""
    from tqdm import tqdm
    from torch_harmonics.examples import PdeDataset

    torch.manual_seed(seed)
    dt = dt_hours * 3600.0
    dt_solver = 150.0
    nsteps = max(1, int(round(dt / dt_solver)))
    ds = PdeDataset(dt=dt, nsteps=nsteps, dims=(nlat, nlon), device=torch.device(device), normalize=True)
    xs, ys = [], []
    for i in tqdm(range(n_train + n_val), desc="shallow-water samples", leave=False, disable=not progress):
        x, y = ds[i]
        xs.append(x.float())
        ys.append(y.float())
    X, Y = torch.stack(xs), torch.stack(ys)
    return (X[:n_train], Y[:n_train]), (X[n_train:], Y[n_train:])


def sphere_weights(nlat: int, nlon: int, device) -> Tensor:
    """``(nlat, 1)`` latitude quadrature weights normalised to sum to one over the grid."""
    from torch_harmonics.quadrature import precompute_latitudes

    _, w = precompute_latitudes(nlat, grid="equiangular")
    w = w.to(torch.float32) / (w.sum() * 1.0)
    return w.view(nlat, 1).to(device) / nlon


def sphere_mse(pred: Tensor, target: Tensor, w: Tensor) -> Tensor:
    """Quadrature-weighted MSE: mean over batch and channels of ``int_S2 (pred - target)^2 dA / 4 pi``."""
    return ((pred - target).pow(2) * w).sum(dim=(-2, -1)).mean()


# ------------------------------------------------------------------------------ training
def _evaluate(model: nn.Module, X: Tensor, Y: Tensor, w: Tensor, batch: int) -> float:
    model.eval()
    tot = 0.0
    with torch.no_grad():
        for i in range(0, X.shape[0], batch):
            tot += float(sphere_mse(model(X[i:i + batch]), Y[i:i + batch], w)) * X[i:i + batch].shape[0]
    model.train()
    return tot / X.shape[0]


def main(args: argparse.Namespace) -> int:
    from ..training import require_single_process
    require_single_process("swe")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tqdm import tqdm

    warnings.filterwarnings("ignore", category=UserWarning, module="torch_harmonics")
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    shape = (args.nlat, args.nlon)
    t0 = time.time()
    (Xtr, Ytr), (Xva, Yva) = make_data(args.nlat, args.nlon, args.n_train, args.n_val, args.dt_hours, device,
                                       args.seed, progress=not args.no_progress)
    t_data = time.time() - t0
    print(f"generated {args.n_train} + {args.n_val} shallow-water pairs at {args.nlat}x{args.nlon} in {t_data:.1f} s")
    w = sphere_weights(args.nlat, args.nlon, device)
    backends = args.backends

    torch.manual_seed(args.seed)
    init_state = S2AttentionNet("pyg-lie", shape, args.channels, args.heads, args.blocks).state_dict()
    models: Dict[str, nn.Module] = {}
    for b in backends:
        m = S2AttentionNet(b, shape, args.channels, args.heads, args.blocks).to(device)
        m.load_state_dict(init_state)  # same parameter names in both attention layers
        models[b] = m
    n_params = sum(p.numel() for p in next(iter(models.values())).parameters())
    history: Dict[str, Dict[str, List[float]]] = {b: {"train": [], "val": [], "time": []} for b in backends}
    persistence = float(sphere_mse(Xva, Yva, w))  # predicting u(t+dt) = u(t)
    print(f"{n_params} parameters per model; persistence (copy input) validation loss {persistence:.4e}")
    opts = {b: torch.optim.Adam(m.parameters(), lr=args.lr) for b, m in models.items()}
    scheds = {b: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=max(args.epochs, 1)) for b, o in opts.items()}
    gen = torch.Generator().manual_seed(args.seed + 1)
    bar = tqdm(range(args.epochs), desc="epochs", disable=args.no_progress)
    for epoch in bar:
        perm = torch.randperm(Xtr.shape[0], generator=gen)
        for b, m in models.items():
            t_ep, tot = time.time(), 0.0
            for i in range(0, Xtr.shape[0], args.batch_size):
                idx = perm[i:i + args.batch_size]
                loss = sphere_mse(m(Xtr[idx]), Ytr[idx], w)
                opts[b].zero_grad(set_to_none=True)
                loss.backward()
                opts[b].step()
                tot += float(loss.detach()) * idx.numel()
            scheds[b].step()
            history[b]["train"].append(tot / Xtr.shape[0])
            history[b]["time"].append(time.time() - t_ep)
            history[b]["val"].append(_evaluate(m, Xva, Yva, w, args.batch_size))
        bar.set_postfix({b[:5]: f"{history[b]['val'][-1]:.3e}" for b in backends})

    summary = {
        "grid": f"{args.nlat}x{args.nlon}", "n_train": args.n_train, "n_val": args.n_val, "epochs": args.epochs,
        "dt_hours": args.dt_hours, "parameters": n_params, "data_seconds": t_data,
        "persistence_val_loss": persistence,
        "final": {b: {"train_loss": h["train"][-1], "val_loss": h["val"][-1],
                      "best_val_loss": min(h["val"]), "seconds_per_epoch": sum(h["time"]) / len(h["time"])}
                  for b, h in history.items()} if args.epochs > 0 else {},
        "history": history,
    }
    if len(backends) == 2 and args.epochs > 0:
        a, c = backends
        summary["max_abs_val_loss_difference"] = max(abs(x - y) for x, y in zip(history[a]["val"], history[c]["val"]))
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)

    # --- maps of one validation sample
    x, y = Xva[:1], Yva[:1]
    preds = {}
    with torch.no_grad():
        for b, m in models.items():
            m.eval()
            preds[b] = m(x)
    names = ["geopotential height", "vorticity", "divergence"]
    cols = [("input u(t)", x), *[(f"prediction ({b})", p) for b, p in preds.items()], ("target u(t+dt)", y)]
    cols.append((f"error ({backends[0]})", preds[backends[0]] - y))
    fig, axes = plt.subplots(3, len(cols), figsize=(3.2 * len(cols), 6.5), squeeze=False)
    for r in range(3):
        lim = float(torch.cat([c[1][0, r].flatten() for c in cols[:-1]]).abs().max()) if len(cols) > 1 else 1.0
        for c, (title, data) in enumerate(cols):
            err = title.startswith("error")
            vmax = float(data[0, r].abs().max()) if err else lim
            ax = axes[r][c]
            ax.imshow(data[0, r].cpu(), extent=(0, 360, -90, 90), cmap="PuOr_r" if err else "RdBu_r",
                      vmin=-vmax, vmax=vmax, aspect="auto")
            if r == 0:
                ax.set_title(title, fontsize=9)
            if c == 0:
                ax.set_ylabel(f"{names[r]}\nlatitude", fontsize=8)
            ax.tick_params(labelsize=6)
    fig.suptitle(f"shallow water, one step of {args.dt_hours:g} h on {args.nlat}x{args.nlon} (validation sample)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "maps.png"), dpi=110)
    plt.close(fig)
    if args.epochs > 0:
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for b, h in history.items():
            ax.semilogy(h["train"], "--", label=f"{b} train")
            ax.semilogy(h["val"], "-", label=f"{b} val")
        ax.axhline(persistence, color="gray", lw=0.8, label="persistence (val)")
        ax.set_xlabel("epoch")
        ax.set_ylabel("sphere-weighted MSE")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "learning_curves.png"), dpi=110)
        plt.close(fig)

    print(f"{'backend':<16} {'train loss':>11} {'val loss':>11} {'best val':>11} {'s/epoch':>8}")
    for b, f in summary["final"].items():
        print(f"{b:<16} {f['train_loss']:11.4e} {f['val_loss']:11.4e} {f['best_val_loss']:11.4e} "
              f"{f['seconds_per_epoch']:8.2f}")
    print(f"persistence val loss {persistence:.4e}; wrote {args.out}/maps.png, learning_curves.png, summary.json")
    _record(args, summary, time.time() - t0)
    return 0


def _record(args, summary: dict, seconds: float) -> None:
    """``results/swe/<run>.json``: both backends' losses next to persistence (no paper number:
    the reference is torch-harmonics' layer trained side by side)."""
    from .results import record_run, setting_text
    metrics = {"persistence_val_loss": summary["persistence_val_loss"], "parameters": summary["parameters"]}
    for b, f in summary["final"].items():
        h = summary["history"][b]
        metrics.update({f"{b}.val_loss": f["val_loss"], f"{b}.best_val_loss": f["best_val_loss"],
                        f"{b}.train_loss_first": h["train"][0], f"{b}.train_loss_last": h["train"][-1]})
    if "max_abs_val_loss_difference" in summary:
        metrics["max_abs_val_loss_difference"] = summary["max_abs_val_loss_difference"]
    setting = setting_text({}, {}, [f"no paper number (torch-harmonics' NeighborhoodAttentionS2 is the reference); "
                                    f"{args.nlat}x{args.nlon} grid, {args.n_train} training pairs, "
                                    f"{args.epochs} epochs"])
    plots = [os.path.join(args.out, n) for n in ("maps.png", "learning_curves.png")]
    record_run(args, "swe", f"{args.nlat}x{args.nlon}", ["train", "swe"], metrics=metrics, paper={},
               setting=setting, wall_time_s=seconds, seed=args.seed, plots=plots)


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(parser)
    raise SystemExit(main(parser.parse_args()))
