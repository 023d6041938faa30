r"""``pyg-lie train qm9-budget``: a QM9 model trained for a fixed time, with its learning curve.

Every model of :mod:`pyg_lie.experiments.qm9_models` (``--model lie-T3``, ``lie-SE3``,
``schnet``, ``dimenet++``) trains on the same data with the same recipe for the same budget
of ``--minutes``: Adam at ``--lr`` with a cosine decay over the budget (the learning rate
follows the fraction of the budget spent, so every model ends its schedule when its time
is up), L1 loss on standardised targets, batches of ``--batch-size`` from the Cormorant
training split in a seeded order. ``--clock cpu`` (default) counts the CPU time of the
training process (one thread with ``--threads 1``), so runs on a shared machine get the
same compute whatever else runs beside them; ``--clock wall`` counts wall time.
Evaluations are outside the budget: ``--eval-points`` times during the run the validation
MAE of the first ``--max-valid`` validation molecules is recorded against the budget spent
(the learning curve), beside the validation MAE of the best constant (the training median,
``valid_mae_<unit>_constant`` in the result: a curve that does not get below it has learned
nothing from the molecules). At the end: the test MAE on the first ``--max-test`` test molecules
(all by default) and the rotation sensitivity (the standard deviation of the prediction
over 8 random rotations of each of the first ``--sensitivity-molecules`` test molecules,
in the target's unit, 0 for an exactly invariant model).

``--augment so3`` rotates every training molecule by a random rotation (the paper's T3
row). The result goes to ``RESULTS_DIR/qm9-budget/<target>-<model>.json`` with the curve;
``--plot`` instead draws the learning curves of all result files of ``--target`` in that
folder into one figure, ``<target>.learning_curves.png``. A run can be continued with
``--resume auto`` (checkpoints at every evaluation, written atomically).
"""
from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch
from torch import nn

from ..cli.types import nonnegative_int, positive_float, positive_int
from .qm9_models import MODEL_KINDS, PRESETS, build_model, count_parameters, random_rotations, rotate, \
    rotation_sensitivity

__all__ = ["add_arguments", "main", "run_name_of", "plot_curves"]

EXPERIMENT = "qm9-budget"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="data/QM9", help="QM9 root (built from qm9pack on first use)")
    p.add_argument("--max-molecules", type=positive_int, default=None,
                   help="build/use only the first N molecules of QM9 (smoke runs)")
    p.add_argument("--target", default="homo", help="homo, lumo, gap, U0, mu, alpha, ... (the paper's units)")
    p.add_argument("--model", choices=MODEL_KINDS, default="lie-T3")
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="LieTransformer preset")
    p.add_argument("--lift", choices=["haar", "finite", "grid"], default="haar", help="lie-SE3 lift")
    p.add_argument("--augment", choices=["none", "so3"], default="none",
                   help="so3: rotate every training molecule by a random rotation")
    p.add_argument("--minutes", type=positive_float, default=10.0, help="training budget per model")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                   help="cpu: CPU time of this process (fair on a shared machine); wall: elapsed time")
    p.add_argument("--eval-points", type=positive_int, default=8, help="validation evaluations during the run")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--lr", type=positive_float, default=5e-4)
    p.add_argument("--max-train", type=positive_int, default=None, help="first N molecules of the training split")
    p.add_argument("--max-valid", type=positive_int, default=500)
    p.add_argument("--max-test", type=positive_int, default=None, help="first N test molecules (default all)")
    p.add_argument("--sensitivity-molecules", type=nonnegative_int, default=500,
                   help="test molecules for the rotation sensitivity (0: skip)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--threads", type=nonnegative_int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--out", default="runs/qm9-budget", help="folder for checkpoints")
    p.add_argument("--resume", default=None, help="'auto': continue from OUT/<run>/checkpoint.pt when present")
    p.add_argument("--plot", action="store_true",
                   help="draw the learning curves of all result files of --target into one figure and exit")
    p.add_argument("--no-progress", action="store_true")
    from .results import add_result_arguments
    add_result_arguments(p, "TARGET-MODEL, e.g. homo-lie-T3-aug")


def run_name_of(args: argparse.Namespace) -> str:
    """``<target>-<model>[-<lift>][-aug]`` (the preset is in the file's config)."""
    name = f"{args.target}-{args.model}"
    if args.model == "lie-SE3":
        name += f"-{args.lift}"
    if args.augment == "so3":
        name += "-aug"
    return name


def _results_dir(args) -> str:
    from .results import RESULTS_DIR, RESULTS_DIR_ENV
    return getattr(args, "results_dir", None) or os.environ.get(RESULTS_DIR_ENV) or RESULTS_DIR


class _Clock:
    """The budget clock: CPU time of the process or wall time, pausable for evaluations."""

    def __init__(self, kind: str, spent: float = 0.0) -> None:
        self._now = time.process_time if kind == "cpu" else time.perf_counter
        self.spent, self._start = spent, None

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> None:
        self.spent += self._now() - self._start
        self._start = None

    def read(self) -> float:
        return self.spent + (0.0 if self._start is None else self._now() - self._start)


def _checkpoint(path: Path, state: Dict) -> None:
    from ..training._atomic import atomic_open
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(str(path), "wb") as f:
        torch.save(state, f)


@torch.no_grad()
def _mae(model: nn.Module, predict, data, batch_size: int, mean: float, std: float) -> float:
    from torch_geometric.loader import DataLoader
    model.eval()
    err, n = 0.0, 0
    for b in DataLoader(data, batch_size=batch_size):
        pred = predict(model, b).double() * std + mean
        err += float((pred - b.y.squeeze(-1).double()).abs().sum())
        n += b.num_graphs
    return err / max(n, 1)


def main(args: argparse.Namespace) -> int:
    if args.plot:
        path = plot_curves(Path(_results_dir(args)) / EXPERIMENT, args.target)
        print(f"wrote {path}")
        return 0
    from torch_geometric.loader import DataLoader

    from ..datasets.qm9 import PAPER_MAE, QM9Transform, cormorant_split
    from ..datasets.qm9_real import QM9
    from ..training import seed_everything
    from .results import record_run

    if args.threads:
        torch.set_num_threads(args.threads)
    t_start = time.time()
    tf = QM9Transform(args.target)
    ds = QM9(args.root, transform=tf, max_molecules=args.max_molecules)
    split = cormorant_split(len(ds), seed=0)
    train_idx = split["train"][:args.max_train] if args.max_train else split["train"]
    valid = ds[split["valid"][:args.max_valid]]
    test = ds[split["test"][:args.max_test] if args.max_test else split["test"]]
    train = ds[train_idx]
    y = ds._data.y[train_idx, tf.column].double() * tf.factor
    mean, std = float(y.mean()), float(y.std()) if y.numel() > 1 else 1.0
    std = std if std > 0 else 1.0
    # the best constant under the L1 loss: a curve above it has learned nothing from the molecules
    constant = float(y.median())
    y_valid = ds._data.y[split["valid"][:args.max_valid], tf.column].double() * tf.factor
    constant_mae = float((y_valid - constant).abs().mean()) if y_valid.numel() else None

    seed_everything(args.seed)
    model, predict = build_model(args.model, tf.num_features, args.preset, args.lift)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    run = getattr(args, "run_name", None) or run_name_of(args)
    ckpt = Path(args.out) / run / "checkpoint.pt"
    budget = 60.0 * args.minutes
    state = {"epoch": 0, "position": 0, "steps": 0, "molecules": 0, "spent": 0.0, "curve": [], "evals_done": 0}
    if args.resume is not None:
        if args.resume != "auto":
            raise ValueError("--resume takes 'auto' (continue from OUT/<run>/checkpoint.pt)")
        if ckpt.is_file():
            saved = torch.load(ckpt, map_location="cpu", weights_only=False)
            if saved.get("config") != _config_key(args):
                raise ValueError(f"{ckpt} was written by a run with other options ({saved.get('config')}); "
                                 f"drop --resume or choose another --out")
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
            state = saved["state"]
            torch.set_rng_state(saved["rng"])
            print(f"resumed {run} at {state['spent']:.0f} of {budget:.0f} s")
    clock = _Clock(args.clock, state["spent"])
    eval_at = [budget * (i + 1) / args.eval_points for i in range(args.eval_points)]
    aug_gen = torch.Generator().manual_seed(args.seed + 17)
    print(f"QM9 {tf.name} [{tf.unit}] {run}: {count_parameters(model)} parameters, train {len(train)}, "
          f"valid {len(valid)}, test {len(test)}; budget {args.minutes:g} min of {args.clock} time"
          + (f"; the training median as prediction: validation MAE {constant_mae:.4g} {tf.unit}"
             if constant_mae is not None else ""))
    progress = None
    if not args.no_progress:
        from tqdm.auto import tqdm
        progress = tqdm(total=int(budget), initial=int(state["spent"]), unit="s", desc=run)
    done = clock.read() >= budget  # a finished run that is resumed goes straight to its test
    while not done:
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed * 1000 + state["epoch"]))
        loader = DataLoader(train[order], batch_size=args.batch_size)
        for i, batch in enumerate(loader):
            if i < state["position"]:
                continue
            model.train()
            clock.start()
            frac = min(1.0, clock.read() / budget)
            for group in opt.param_groups:
                group["lr"] = args.lr * 0.5 * (1.0 + math.cos(math.pi * frac))
            if args.augment == "so3":
                batch.pos = rotate(batch.pos, batch.batch, random_rotations(batch.num_graphs, aug_gen))
            loss = (predict(model, batch) - (batch.y.squeeze(-1) - mean) / std).abs().mean()
            if not torch.isfinite(loss):
                raise FloatingPointError(f"{run}: the training loss became {float(loss)} at step {state['steps']}; "
                                         f"lower --lr")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            clock.stop()
            state["steps"] += 1
            state["molecules"] += batch.num_graphs
            state["position"] = i + 1
            spent = clock.read()
            if progress is not None:
                progress.update(int(spent) - progress.n)
            while state["evals_done"] < len(eval_at) and spent >= eval_at[state["evals_done"]]:
                mae = _mae(model, predict, valid, args.batch_size, mean, std)
                state["curve"].append({"budget_s": round(spent, 2), "steps": state["steps"],
                                       "molecules": state["molecules"], f"valid_mae_{tf.unit}": mae})
                state["evals_done"] += 1
                state["spent"] = spent
                _checkpoint(ckpt, {"model": model.state_dict(), "opt": opt.state_dict(), "state": state,
                                   "rng": torch.get_rng_state(), "config": _config_key(args)})
                if progress is not None:
                    progress.set_postfix({"valid MAE": f"{mae:.4g} {tf.unit}"})
            if spent >= budget:
                done = True
                break
        else:
            state["epoch"] += 1
            state["position"] = 0
    if progress is not None:
        progress.close()
    test_mae = _mae(model, predict, test, args.batch_size, mean, std)
    sens = None
    if args.sensitivity_molecules:
        sens = rotation_sensitivity(model, predict, DataLoader(test[:args.sensitivity_molecules],
                                                               batch_size=args.batch_size), scale=std,
                                    seed=args.seed)
    unit = tf.unit
    print(f"{run}: test MAE {test_mae:.4g} {unit}, rotation sensitivity {sens if sens is None else f'{sens:.4g}'} "
          f"{unit}, {state['steps']} steps, {state['molecules'] / len(train):.2f} epochs")
    metrics = {f"test_mae_{unit}": test_mae, f"rotation_sensitivity_{unit}": sens,
               "parameters": count_parameters(model), "steps": state["steps"],
               "epochs": state["molecules"] / len(train), "budget_minutes": args.minutes,
               "molecules_per_budget_s": state["molecules"] / max(clock.read(), 1e-9),
               f"valid_mae_{unit}_constant": constant_mae}
    paper = {f"test_mae_{unit}_SE3": PAPER_MAE["SE3"].get(tf.name),
             f"test_mae_{unit}_T3_aug": PAPER_MAE["T3+aug"].get(tf.name)}
    setting = (f"{args.minutes:g} min of {args.clock} time per model, {len(train)} training molecules, "
               f"validation on {len(valid)}, test on {len(test)}, rotation sensitivity on "
               f"{args.sensitivity_molecules} (the paper trains 500 epochs on 100,000)")
    record_run(args, EXPERIMENT, run, ["train", "qm9-budget"], metrics=metrics, paper=paper, setting=setting,
               wall_time_s=time.time() - t_start, seed=args.seed,
               extra={"curve": state["curve"], "model": {"kind": args.model, "preset": args.preset if
                                                         args.model.startswith("lie") else None,
                                                         "lift": args.lift if args.model == "lie-SE3" else None,
                                                         "augment": args.augment, "repr": repr(model)[:400]}})
    return 0


def _config_key(args) -> Dict:
    keys = ("target", "model", "preset", "lift", "augment", "minutes", "clock", "eval_points", "batch_size", "lr",
            "max_train", "max_valid", "seed", "max_molecules")
    return {k: getattr(args, k, None) for k in keys}


def plot_curves(folder: Path, target: str) -> Path:
    """One figure: validation MAE against the budget spent, every result file of ``target``."""
    import json

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = sorted(folder.glob(f"{target}-*.json"))
    if not files:
        raise ValueError(f"no result files {folder}/{target}-*.json; run pyg-lie train qm9-budget --target {target} "
                         f"for each model first")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    unit, constant_drawn = None, False
    for path in files:
        rec = json.loads(path.read_text())
        curve: List[Dict] = rec.get("curve") or []
        key = next((k for k in (curve[0] if curve else {}) if k.startswith("valid_mae_")), None)
        if key is None:
            continue
        unit = key[len("valid_mae_"):]
        test = rec["metrics"].get(f"test_mae_{unit}")
        label = rec["run"][len(target) + 1:] + (f" (test {test:.4g})" if test is not None else "")
        line, = ax.plot([c["budget_s"] / 60 for c in curve], [c[key] for c in curve], marker="o", label=label)
        constant = rec["metrics"].get(f"{key}_constant")
        if constant is not None:
            ax.axhline(constant, color=line.get_color(), linestyle=":", linewidth=1)
            constant_drawn = True
    clock = json.loads(files[0].read_text())["config"].get("clock", "cpu")
    ax.set_xlabel(f"training budget spent ({clock} minutes)")
    ax.set_ylabel(f"validation MAE ({unit})")
    ax.set_yscale("log")
    ax.set_title(f"QM9 {target}: equal {clock} time" + (" (dotted: the training median)" if constant_drawn else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = folder / f"{target}.learning_curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
