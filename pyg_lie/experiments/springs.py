r"""``pyg-lie train springs``: Hamiltonian LieTransformer on spring dynamics (paper Sec. 5.3).

A :class:`~pyg_lie.models.HamiltonianNODE` whose potential ``V(q)`` is a
LieTransformer (T(2), or SE(2) with the finite ``C_2`` lift; constant attention
normalisation; features ``f_i = (m_i, k_i)``) is trained on random 5-step
windows of :class:`~pyg_lie.datasets.SpringDynamics` trajectories with the
arithmetic-mean MSE over the window, Adam and cosine annealing (Appendix I.3).
``--potential fc`` and ``--potential gn`` train the paper's baselines in the same
harness (same data, loss, optimiser and metrics): the fully connected network on the
flattened system and the graph network on the complete particle graph
(:mod:`pyg_lie.models.springs_baselines`).

Reported at the end (``summary.json``, printed):

* ``test_gmse_5`` (the paper's metric, Appendix I.3) and ``test_mse_5``: 5-step rollouts on
  random windows of the test trajectories; per step the state MSE averaged over test systems,
  then averaged over the 5 steps geometrically (:func:`step_geometric_mean`,
  ``exp(mean_t log mse_t)``) or arithmetically (LieConv's definition, also the training loss);
* ``rollout_gmse_100`` (the paper's) and ``rollout_mse_100``: the same two averages of the
  100-step rollout from ``t = 0``; ``rollout_gmse_systems_100``: the geometric mean over
  systems and steps together (what earlier versions called ``rollout_gmse_100``);
* ``energy_drift_100``: mean over test systems of ``|H(z_100) - H(z_0)| / |H(z_0)|``
  of the *true* Hamiltonian along the predicted rollout (and the same for the
  RK4 ground truth as a floor);
* plots: ``trajectories.png`` (prediction vs truth, Fig. 6), ``rollout_error.png``
  (error against rollout step, Fig. 5), ``learning_curves.png``, ``rollout_error.csv``
  (that curve's numbers);
  with ``--sizes`` a sweep over training-set sizes and ``data_efficiency.png``
  (Fig. 4) next to the paper's value (about 4.5e-7 at 10^4 examples).

Runs under ``torchrun --nproc_per_node=P -m pyg_lie train springs ...`` (DDP).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Dict, List, Optional

import torch
from torch import nn
from torch.utils.data import Subset

from ..cli.types import nonnegative_float, nonnegative_int, positive_float, positive_int
from ..datasets.springs import SpringDynamics, spring_hamiltonian
from ..models.hamiltonian import HamiltonianNODE, PairwiseMLPPotential, rollout_mse
from ..models.springs_baselines import FCPotential, GraphNetworkPotential
from ..training import (DistEnv, all_reduce_sum, cleanup, eval_loader, fit, init_distributed, seed_everything,
                        unwrap, wrap_model)
from ..training.ddp import gather_objects

PAPER = {  # Hutchinson et al. 2021, Figs. 4-5 (LieTransformer-T2, 842k parameters, 10^4 examples); test
    # losses there are geometric means over time steps (Appendix I.3), so they sit beside test_gmse_5 and
    # rollout_gmse_100
    "test_gmse_5": {10000: 4.5e-7},
    "rollout_gmse_100": {10000: 7e-4},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", choices=["T2", "SE2"], default="T2",
                   help="LieTransformer group: T2, or SE2 with the finite C2 lift (2 lifts per particle)")
    p.add_argument("--potential", choices=list(POTENTIALS), default="lie",
                   help="V(q): the LieTransformer; the paper's baselines 'fc' (MLP on the flattened system) "
                        "and 'gn' (graph network on the complete particle graph); or 'pair', a small "
                        "pairwise-distance MLP")
    p.add_argument("--n-train", type=positive_int, default=200, help="training systems (one 5-step window each)")
    p.add_argument("--n-val", type=positive_int, default=100)
    p.add_argument("--n-test", type=positive_int, default=100, help="test trajectories")
    p.add_argument("--sizes", type=str, default=None,
                   help="comma-separated training-set sizes for the data-efficiency sweep (Fig. 4); "
                        "nested subsets of one training set, fixed test set")
    p.add_argument("--epochs", type=positive_int, default=None,
                   help="epochs; default round(epoch-scale * sqrt(3000 / n_train)) as in the paper")
    p.add_argument("--epoch-scale", type=positive_float, default=3.0, help="the paper uses 400")
    p.add_argument("--batch-size", type=positive_int, default=100, help="global batch (full batch when n <= it)")
    p.add_argument("--lr", type=nonnegative_float, default=1e-3)
    p.add_argument("--hidden", type=positive_int, default=None,
                   help="width: d_v of the LieTransformer (default 32; paper: 160, small model 80), "
                        "the MLP width of fc (default 150) and gn (default 64), pair (default 32)")
    p.add_argument("--layers", type=positive_int, default=None,
                   help="attention blocks of the LieTransformer (default 2; paper: 5, small model 3), "
                        "hidden layers of fc (default 4) and pair (default 2), graph-network blocks of gn "
                        "(default 1)")
    p.add_argument("--heads", type=positive_int, default=4, help="heads (paper: 8)")
    p.add_argument("--chunk-len", type=positive_int, default=5, help="training window in steps")
    p.add_argument("--rollout-steps", type=positive_int, default=100)
    p.add_argument("--seed", type=nonnegative_int, default=0, help="model / data-order seed")
    p.add_argument("--data-seed", type=nonnegative_int, default=0, help="data seed (train, val, test use +0, +1, +2)")
    p.add_argument("--grad-clip", type=positive_float, default=None)
    p.add_argument("--eval-every", type=positive_int, default=1,
                   help="validate every this many epochs (and at the end)")
    p.add_argument("--double", action="store_true", help="train in float64")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument("--threads", type=nonnegative_int, default=1,
                   help="torch intra-op threads per process (0: torch's default; 1 is often faster on a "
                        "machine shared with other work; raise it on a large idle machine)")
    p.add_argument("--out", type=str, default="runs/springs")
    p.add_argument("--resume", type=str, default=None, help="checkpoint to continue from ('auto': OUT/checkpoint.pt)")
    p.add_argument("--stop-after", type=positive_int, default=None,
                   help="stop after this many epochs of this invocation (time-boxed jobs); continue with --resume")
    p.add_argument("--no-progress", action="store_true")
    from .results import add_result_arguments
    add_result_arguments(p, "POTENTIAL-GROUP-nN_TRAIN, e.g. lie-T2-n200, one per size of --sizes")


#: ``--potential`` -> default (width, layers): the LieTransformer's scaled-down size; the fc and gn
#: baselines at the widths of the reference implementation the paper's baselines come from
POTENTIALS = {"lie": (32, 2), "fc": (150, 4), "gn": (64, 1), "pair": (32, 2)}


def build_potential(group: str, hidden_channels: Optional[int] = None, num_layers: Optional[int] = None,
                    heads: int = 4, potential: str = "lie") -> nn.Module:
    """The potential network ``V(x=(m, k), pos=q, batch) -> (B, 1)``.

    ``"lie"``: LieTransformer with constant attention normalisation (the paper's
    choice; softmax trained poorly), dot-product content + MLP location kernel
    (width 16, 3 layers), additive combination, all pairs of particles; T(2) with
    one lift, or SE(2) with the two-element finite lift ``C_2`` (exact
    ``T(2) x| C_2`` invariance).  ``"fc"``: :class:`FCPotential` (6 particles);
    ``"gn"``: :class:`GraphNetworkPotential`; ``"pair"``: :class:`PairwiseMLPPotential`
    (``group`` and ``heads`` matter for ``"lie"`` only).  ``None`` sizes take the
    defaults of :data:`POTENTIALS`.
    """
    if potential not in POTENTIALS:
        raise ValueError(f"potential must be one of {sorted(POTENTIALS)}, got {potential!r}")
    hidden_channels = POTENTIALS[potential][0] if hidden_channels is None else hidden_channels
    num_layers = POTENTIALS[potential][1] if num_layers is None else num_layers
    if potential == "pair":
        return PairwiseMLPPotential(2, hidden_channels, num_layers)
    if potential == "fc":
        return FCPotential(6, 2, 2, hidden_channels, num_layers)
    if potential == "gn":
        return GraphNetworkPotential(2, 2, hidden_channels, num_layers)
    if group not in ("T2", "SE2"):
        raise ValueError(f"group must be 'T2' or 'SE2', got {group!r}")
    from ..models.lie_transformer import LieTransformer
    lift = dict(lift_samples=1, lift="haar") if group == "T2" else dict(lift_samples=2, lift="finite")
    return LieTransformer(group, 2, hidden_channels, 1, num_layers=num_layers, heads=heads, radius=None,
                          normalization="constant", content="dot_product", location="mlp",
                          combine="additive", kernel_dim=16, kernel_layers=3, **lift)


def _batch_to(batch: Dict[str, torch.Tensor], device, dtype):
    return (batch["z"].to(device, dtype), batch["m"].to(device, dtype), batch["k"].to(device, dtype))


def _predict(model: nn.Module, z0: torch.Tensor, m: torch.Tensor, k: torch.Tensor, num_steps: int,
             dt: float) -> torch.Tensor:
    """The model's rollout from the finite states ``z0``; a rollout whose states leave the finite
    range (the model diverged, e.g. at too high a learning rate) ends the run with a
    FloatingPointError that says so, instead of the model's input check on its own states."""
    try:
        return model(z0, m, k, num_steps=num_steps, dt=dt)
    except ValueError as err:
        if "non-finite" in str(err) and bool(torch.isfinite(z0).all()):
            raise FloatingPointError("the model's rollout diverged: its states became non-finite (NaN or inf); "
                                     "lower --lr") from err
        raise


def _window_loss(model: nn.Module, batch, dt: float, device, dtype) -> torch.Tensor:
    z, m, k = _batch_to(batch, device, dtype)
    pred = _predict(model, z[:, 0], m, k, z.shape[1] - 1, dt)
    return rollout_mse(pred, z).mean()


def step_geometric_mean(step_mse: torch.Tensor) -> float:
    """The paper's test loss (Appendix I.3): per time step the MSE averaged over systems, then the
    geometric mean of those per-step losses over the steps, ``exp(mean_t log(mean_s e_st))``.

    ``step_mse`` is ``(steps,)`` (per-step losses already averaged over systems) or
    ``(systems, steps)`` (per-system per-step MSEs). A zero per-step loss gives 0.
    """
    if not isinstance(step_mse, torch.Tensor) or not step_mse.is_floating_point():
        raise TypeError(f"step_mse must be a floating-point tensor, got {type(step_mse).__name__}")
    if step_mse.dim() not in (1, 2) or step_mse.numel() == 0:
        raise ValueError(f"step_mse must be a non-empty (steps,) or (systems, steps) tensor, got shape "
                         f"{tuple(step_mse.shape)}")
    per_step = step_mse.double() if step_mse.dim() == 1 else step_mse.double().mean(0)
    if not bool(torch.isfinite(per_step).all()) or bool((per_step < 0).any()):
        raise ValueError("step_mse must hold finite values >= 0 (squared errors)")
    return float(per_step.log().mean().exp())


@torch.no_grad()
def window_step_mse(model: nn.Module, dataset, dt: float, env: DistEnv, dtype, batch_size: int = 100) -> torch.Tensor:
    """Per predicted step of the window rollouts, the state MSE averaged over all systems
    (all ranks, exact shard reduction): a float64 ``(steps,)`` tensor."""
    net = unwrap(model)
    net.eval()
    tot, count = None, torch.zeros(1, dtype=torch.float64)
    for batch in eval_loader(dataset, batch_size, env):
        z, m, k = _batch_to(batch, env.device, dtype)
        pred = _predict(net, z[:, 0], m, k, z.shape[1] - 1, dt)
        per_step = (pred[:, 1:] - z[:, 1:]).pow(2).mean(dim=(2, 3)).double().sum(0).cpu()
        tot = per_step if tot is None else tot + per_step
        count += z.shape[0]
    if tot is None:  # this rank got no systems: the window length comes from the data set
        tot = torch.zeros(dataset[0]["z"].shape[0] - 1, dtype=torch.float64)
    tot = all_reduce_sum(torch.cat([tot, count]), env)
    return tot[:-1] / tot[-1]


def window_mse(model: nn.Module, dataset, dt: float, env: DistEnv, dtype, batch_size: int = 100) -> float:
    """Arithmetic mean over systems and steps of the window-rollout MSE (LieConv's test loss and
    this command's training loss)."""
    return float(window_step_mse(model, dataset, dt, env, dtype, batch_size).mean())


@torch.no_grad()
def rollout_metrics(model: nn.Module, test: SpringDynamics, steps: int, env: DistEnv, dtype,
                    batch_size: int = 50) -> Dict[str, object]:
    """100-step rollouts from ``t = 0`` on every test trajectory (sharded over ranks).

    Returns per-system per-step MSE curves ``(S, steps)``, the energy drifts of
    prediction and truth, and one example trajectory (rank 0's first system).
    """
    net = unwrap(model)
    net.eval()
    curves, drift_pred, drift_true, example = [], [], [], None
    test.mode = "trajectories"
    for batch in eval_loader(test, batch_size, env):
        z, m, k = _batch_to(batch, env.device, dtype)
        z = z[:, :steps + 1]
        pred = _predict(net, z[:, 0], m, k, steps, test.dt)
        curves.append((pred[:, 1:] - z[:, 1:]).pow(2).mean(dim=(2, 3)).double().cpu())
        d = pred.shape[-1] // 2
        for traj, out in ((pred, drift_pred), (z, drift_true)):
            zz = traj.double()
            H = spring_hamiltonian(zz[..., :d], zz[..., d:], m.double().unsqueeze(1), k.double().unsqueeze(1))
            out.append(((H[:, -1] - H[:, 0]).abs() / H[:, 0].abs()).cpu())
        if example is None:
            example = (pred[0].double().cpu(), z[0].double().cpu())
    parts = gather_objects((torch.cat(curves), torch.cat(drift_pred), torch.cat(drift_true), example), env)
    return {"curves": torch.cat([p[0] for p in parts]), "drift_pred": torch.cat([p[1] for p in parts]),
            "drift_true": torch.cat([p[2] for p in parts]), "example": parts[0][3]}


def _plot_rollout(res: Dict[str, object], out: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = res["curves"]  # (S, T)
    T = curves.shape[1]
    steps = torch.arange(1, T + 1)
    logc = curves.clamp_min(1e-30).log()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot(steps, logc.mean(0).exp(), label="geometric mean over systems")
    ax.plot(steps, curves.mean(0), label="arithmetic mean", ls="--")
    lo, hi = torch.quantile(curves, 0.25, dim=0), torch.quantile(curves, 0.75, dim=0)
    ax.fill_between(steps, lo, hi, alpha=0.25, label="25-75%")
    ax.set_yscale("log")
    ax.set_xlabel("rollout step")
    ax.set_ylabel("state MSE")
    ax.set_title(f"error vs rollout step ({title})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "rollout_error.png"), dpi=120)
    plt.close(fig)

    pred, true = res["example"]  # (T+1, n, 4)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for i in range(true.shape[1]):
        c = f"C{i}"
        ax.plot(true[:, i, 0], true[:, i, 1], c=c, lw=1.5, alpha=0.6, label="truth" if i == 0 else None)
        ax.plot(pred[:, i, 0], pred[:, i, 1], c=c, lw=1.0, ls="--", label="prediction" if i == 0 else None)
        ax.plot(true[0, i, 0], true[0, i, 1], "o", c=c, ms=4)
    ax.set_aspect("equal")
    ax.set_title(f"trajectories, {T} steps ({title})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "trajectories.png"), dpi=120)
    plt.close(fig)


def _epochs(args: argparse.Namespace, n: int) -> int:
    if args.epochs is not None:
        return args.epochs
    return max(1, int(round(args.epoch_scale * math.sqrt(3000 / n))))


def train_one(args: argparse.Namespace, env: DistEnv, train_set, val, test: SpringDynamics, out: str,
              resume: Optional[str]) -> Dict[str, float]:
    """Train one model on ``train_set`` and evaluate it; returns the summary (on every rank)."""
    dtype = torch.float64 if args.double else torch.float32
    t0 = time.time()
    n = len(train_set)
    batch_size = min(args.batch_size, n)
    if batch_size % env.world_size:
        batch_size -= batch_size % env.world_size
    epochs = _epochs(args, n)
    seed_everything(args.seed)
    net = HamiltonianNODE(build_potential(args.group, args.hidden, args.layers, args.heads, args.potential))
    net = net.to(dtype)
    model = wrap_model(net, env, find_unused_parameters=True)  # V's output bias gets no gradient
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    dt = test.dt
    title = f"{_label(args)}, n={n}"

    def evaluate(m: nn.Module, epoch: int) -> Dict[str, float]:
        return {"val_mse": window_mse(m, val, dt, env, dtype)}

    rows = fit(model, opt, sched, train_set, env, lambda m, b: _window_loss(m, b, dt, env.device, dtype), evaluate,
        epochs=epochs, batch_size=batch_size, seed=args.seed, out_dir=out, resume=resume,
        progress=not args.no_progress, grad_clip=args.grad_clip, extra={"args": vars(args)}, desc=title,
        stop_after=args.stop_after, eval_every=args.eval_every)
    if rows and rows[-1]["epoch"] + 1 < epochs:  # stopped early by --stop-after: resume later
        return {"n_train": n, "epochs": epochs, "stopped_after_epoch": int(rows[-1]["epoch"])}
    test.mode = "chunks"
    test_steps = window_step_mse(model, test, dt, env, dtype)
    res = rollout_metrics(model, test, args.rollout_steps, env, dtype)
    curves = res["curves"]
    T = args.rollout_steps
    summary = {
        "n_train": n, "epochs": epochs, "batch_size": batch_size, "world_size": env.world_size,
        "params": sum(p.numel() for p in net.parameters()),
        f"test_gmse_{args.chunk_len}": step_geometric_mean(test_steps),
        f"test_mse_{args.chunk_len}": float(test_steps.mean()),
        f"rollout_gmse_{T}": step_geometric_mean(curves),
        f"rollout_mse_{T}": float(curves.mean()),
        f"rollout_gmse_systems_{T}": float(curves.clamp_min(1e-30).log().mean().exp()),
        f"energy_drift_{T}": float(res["drift_pred"].mean()),
        f"energy_drift_{T}_truth": float(res["drift_true"].mean()),
    }
    if env.is_main:
        _plot_rollout(res, out, title)
        write_curve_csv(curves, os.path.join(out, "rollout_error.csv"))
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        _record(args, summary, rows, out, time.time() - t0)
    return summary


def _label(args: argparse.Namespace) -> str:
    return {"lie": f"LieTransformer-{args.group}", "fc": "FC", "gn": "GN", "pair": "pair MLP"}[args.potential]


def write_curve_csv(curves: torch.Tensor, path: str) -> None:
    """The error-vs-step curve of ``(systems, steps)`` per-step MSEs: per step the geometric
    and the arithmetic mean over test systems (``step,gmse,mse``)."""
    gm = curves.double().clamp_min(1e-30).log().mean(0).exp()
    am = curves.double().mean(0)
    with open(path, "w") as f:
        f.write("step,gmse,mse\n")
        for t in range(curves.shape[1]):
            f.write(f"{t + 1},{float(gm[t]):.6e},{float(am[t]):.6e}\n")


def read_curve_csv(path: str) -> Dict[str, List[float]]:
    """``{"step": [...], "gmse": [...], "mse": [...]}`` from :func:`write_curve_csv`'s file."""
    import csv
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or set(rows[0]) != {"step", "gmse", "mse"}:
        raise ValueError(f"{path}: not a rollout-error curve (columns step,gmse,mse)")
    return {k: [float(r[k]) for r in rows] for k in ("step", "gmse", "mse")}


@torch.no_grad()
def evaluate_checkpoint(checkpoint: str, n_test: Optional[int] = None,
                        rollout_steps: Optional[int] = None) -> Dict[str, object]:
    """Rebuild the model of a ``pyg-lie train springs`` checkpoint (its stored arguments), load
    its weights and return :func:`rollout_metrics` on the run's test set (single process)."""
    from ..training.checkpoint import load_weights
    if not os.path.isfile(checkpoint):
        raise ValueError(f"checkpoint {checkpoint!r} does not exist")
    stored = torch.load(checkpoint, map_location="cpu", weights_only=False).get("extra", {}).get("args")
    if not isinstance(stored, dict):
        raise ValueError(f"checkpoint {checkpoint!r} holds no 'pyg-lie train springs' arguments")
    a = argparse.Namespace(**stored)
    potential = getattr(a, "potential", "lie")
    dtype = torch.float64 if a.double else torch.float32
    net = HamiltonianNODE(build_potential(a.group, a.hidden, a.layers, a.heads, potential)).to(dtype)
    load_weights(checkpoint, net, flag="checkpoint")
    steps = rollout_steps or a.rollout_steps
    test = SpringDynamics(n_test or a.n_test, mode="chunks", chunk_len=a.chunk_len, seed=a.data_seed + 2,
                          num_steps=max(500, steps), t_end=0.01 * max(500, steps))
    env = init_distributed("cpu")
    return rollout_metrics(net, test, steps, env, dtype)


def plot_rollout_comparison(folder: str, out: Optional[str] = None) -> Optional[str]:
    """One figure of every run's rollout error against time (paper Fig. 5) and energy drift.

    Reads the ``<run>.rollout_error.csv`` curves and ``<run>.json`` result files of
    ``folder`` (``results/springs``) and writes ``rollout_comparison.png`` there (or to
    ``out``); returns its path, or None when there are no curves.
    """
    import glob
    import re

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for csv_path in sorted(glob.glob(os.path.join(folder, "*.rollout_error.csv"))):
        run = os.path.basename(csv_path)[:-len(".rollout_error.csv")]
        meta_path = os.path.join(folder, run + ".json")
        meta = json.load(open(meta_path)) if os.path.isfile(meta_path) else {}
        runs.append((run, read_curve_csv(csv_path), meta))
    if not runs:
        return None

    def size(meta) -> int:
        return int(meta.get("config", {}).get("n_train") or 0)

    def method(run: str, meta) -> str:  # one colour per model (potential, group, size)
        config, params = meta.get("config", {}), meta.get("metrics", {}).get("params")
        if "potential" not in config:
            return re.sub(r"-n\d+.*", "", run)
        kind = config["potential"] + (f"-{config.get('group')}" if config["potential"] == "lie" else "")
        return kind + (f" {params / 1000:.0f}k" if isinstance(params, (int, float)) else "")

    runs.sort(key=lambda r: (size(r[2]), r[0]))
    sizes = sorted({size(r[2]) for r in runs})
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    styles = ["-", "--", ":", "-."]
    colours: Dict[str, str] = {}
    labels, drifts = [], []
    for run, curve, meta in runs:
        c = colours.setdefault(method(run, meta), f"C{len(colours) % 10}")
        ls = styles[sizes.index(size(meta)) % len(styles)]  # one line style per training-set size
        dt = 0.01
        ax.plot([s * dt for s in curve["step"]], curve["gmse"], c=c, ls=ls, label=f"{run}")
        m = meta.get("metrics", {})
        drift = next((v for k, v in m.items() if k.startswith("energy_drift_") and not k.endswith("_truth")), None)
        if drift is not None:
            labels.append(run)
            drifts.append((drift, c))
    ax.set_yscale("log")
    ax.set_xlabel("time (rollout steps x 0.01)")
    ax.set_ylabel("state MSE (geometric mean over test systems)")
    ax.set_title("rollout error vs time (paper Fig. 5)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    if drifts:
        bx.barh(range(len(drifts)), [d for d, _ in drifts], color=[c for _, c in drifts])
        bx.set_yticks(range(len(drifts)), labels, fontsize=6)
        bx.set_xscale("log")
        bx.invert_yaxis()
        truth = next((v for r in runs for k, v in r[2].get("metrics", {}).items() if k.endswith("_truth")), None)
        if truth is not None:
            bx.axvline(truth, c="k", ls=":", lw=1, label="RK4 ground truth")
            bx.legend(fontsize=6)
        bx.set_xlabel("relative energy drift |H(z_T) - H(z_0)| / |H(z_0)|")
        bx.set_title("energy drift over the rollout", fontsize=9)
        bx.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    path = out or os.path.join(folder, "rollout_comparison.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


#: Appendix I.3: the paper's model (LieTransformer-T2, 842k parameters), optimiser, epoch rule and
#: the training-set size of its headline numbers
PAPER_SETTING = {"potential": "lie", "group": "T2", "hidden": 160, "layers": 5, "heads": 8, "epoch_scale": 400.0,
                 "lr": 1e-3, "batch_size": 100, "chunk_len": 5, "n_train": 10000}
#: the baselines: the reference implementation's widths, the paper's training setting
BASELINE_SETTING = {"fc": {"hidden": 150, "layers": 4}, "gn": {"hidden": 64, "layers": 1}}


def _record(args, summary: Dict[str, float], rows: List[Dict[str, float]], out: str, seconds: float) -> None:
    """``results/springs/<run>.json`` for one training-set size."""
    from .results import record_run, setting_text
    metrics = {k: v for k, v in summary.items() if k not in ("n_train", "world_size")}
    if rows:
        metrics.update(train_loss_first=rows[0]["train_loss"], train_loss_last=rows[-1]["train_loss"])
        if "val_mse" in rows[-1]:
            metrics["val_mse"] = rows[-1]["val_mse"]
    paper = {}
    if args.potential == "lie" and args.group == "T2":
        if args.chunk_len == 5:
            paper["test_gmse_5"] = PAPER["test_gmse_5"][10000]
        if args.rollout_steps == 100:
            paper["rollout_gmse_100"] = PAPER["rollout_gmse_100"][10000]
    n = summary["n_train"]
    extra = [f"{summary['epochs']} epochs" + (" (--epochs)" if args.epochs is not None else "")]
    reference = PAPER_SETTING
    if args.potential in BASELINE_SETTING:
        reference = {**{k: v for k, v in PAPER_SETTING.items() if k not in ("group", "heads")},
                     "potential": args.potential, **BASELINE_SETTING[args.potential]}
    setting = setting_text({**vars(args), "n_train": n}, reference, extra)
    name = f"{args.potential}-{args.group}-n{n}" if args.potential == "lie" else f"{args.potential}-n{n}"
    plots = [os.path.join(out, f) for f in ("rollout_error.png", "trajectories.png")]
    if args.run_name and args.sizes:  # one file per size
        args = argparse.Namespace(**{**vars(args), "run_name": f"{args.run_name}-n{n}"})
    path = record_run(args, "springs", name, ["train", "springs"], metrics=metrics, paper=paper, setting=setting,
                      wall_time_s=seconds, seed=args.seed, plots=plots, extra={"n_train": n})
    import shutil
    curve = os.path.join(out, "rollout_error.csv")
    if os.path.isfile(curve):
        shutil.copyfile(curve, path.with_suffix(".rollout_error.csv"))
        plot_rollout_comparison(str(path.parent))


def _plot_sweep(rows: List[Dict[str, float]], out: str, label: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    key = next(k for k in rows[0] if k.startswith("test_gmse_"))
    ax.plot([r["n_train"] for r in rows], [r[key] for r in rows], "o-", label=f"this run ({label})")
    ref = PAPER["test_gmse_5"]
    ax.plot(list(ref), list(ref.values()), "*", ms=12, c="k", label="paper, LieTransformer-T2")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training examples")
    ax.set_ylabel("5-step test MSE (geometric mean over steps)")
    ax.set_title("data efficiency (paper Fig. 4)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "data_efficiency.png"), dpi=120)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    width, depth = POTENTIALS[args.potential]
    args.hidden = width if args.hidden is None else args.hidden
    args.layers = depth if args.layers is None else args.layers
    env = init_distributed(args.device)
    try:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [args.n_train]
        if any(s < 1 for s in sizes):
            raise ValueError(f"--sizes / --n-train must be positive, got {sizes}")
        full = SpringDynamics(max(sizes), mode="chunks", chunk_len=args.chunk_len, seed=args.data_seed)
        val = SpringDynamics(args.n_val, mode="chunks", chunk_len=args.chunk_len, seed=args.data_seed + 1)
        steps = max(args.rollout_steps, args.chunk_len)
        test = SpringDynamics(args.n_test, mode="chunks", chunk_len=args.chunk_len, seed=args.data_seed + 2,
                              num_steps=max(500, steps), t_end=0.01 * max(500, steps))
        rows = []
        for n in sizes:
            out = args.out if len(sizes) == 1 else os.path.join(args.out, f"n{n}")
            resume = args.resume
            if resume == "auto":
                cand = os.path.join(out, "checkpoint.pt")
                resume = cand if os.path.isfile(cand) else None
            train_set = full if n == len(full) else Subset(full, range(n))
            s = train_one(args, env, train_set, val, test, out, resume)
            rows.append(s)
            if env.is_main:
                print(json.dumps(s))
        if env.is_main and len(sizes) > 1:
            import csv
            with open(os.path.join(args.out, "sweep.csv"), "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            _plot_sweep(rows, args.out, f"{args.potential}-{args.group}")
            print(f"paper (LieTransformer-T2, 842k params): 5-step test MSE ~4.5e-7 at n=10^4, "
                  f"100-step ~7e-4; see {os.path.join(args.out, 'data_efficiency.png')}")
    finally:
        cleanup(env)
    return 0
