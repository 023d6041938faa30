r"""``pyg-lie train lie-sequence-ablation``: why does model C (MLP score) match or beat G?

The paper (Musialski, arXiv 2606.20547, tables 2-4) reports the closed-form score G at
or below the MLP score C. This command varies one factor at a time from a base run of
``pyg-lie train lie-sequence`` (per-token head) and trains G and C under each, with the
same seeds, so that the factor that moves G against C can be read off:

* ``base``: the paper's model (pyg_lie's algebra coordinates, block weights started at
  the temperature as in the paper, the data set's default steps, ``--steps`` optimiser
  steps);
* ``paper-coords``: the attention layers see the paper's coordinates (rotation angle /
  rotation vector, log-scale and shear), i.e. those blocks of ``w_ij`` divided by
  ``sqrt(2)``: pyg_lie's Frobenius-orthonormal basis makes them ``sqrt(2)`` x larger;
* ``init-low`` / ``init-high``: G's block weights start at ``--init-scales`` x the
  temperature instead of 1 (C has no block weights; not run);
* ``small-steps``: the data's step ``xi`` drawn at ``--data-scale`` x the default size;
* ``long``: ``--long-factor`` x the optimiser steps.

Every finished run is cached as ``--out/<group>/<factor>_<model>_<seed>.json`` (a
rerun resumes). The result file ``results/lie-sequence-ablation/<group>.json`` has,
per factor and model, the mean and std of the pose error over seeds, the largest
seed's error, the number of seeds whose error stayed above 0.1 (a run that never left
the initial plateau), the ratio G / C of the mean pose errors (for ``init-*`` against
C's base runs, which those factors do not change), and two numbers of the
freshly initialised model's first attention layer (:func:`initial_attention`): the weight
a token gives itself and the order signal, how much its output says about where the token
sits in the sequence. Its ``runs`` field holds every run's seed, pose error and final loss, so
``--from-results`` rebuilds the file from a clone (result files written before that field
existed are rebuilt only by training). Example::

    pyg-lie train lie-sequence-ablation --group SO3 --seeds 0 1 --steps 1000
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Dict, List

import torch

from ..cli.types import nonnegative_int, positive_float, positive_int
from ..training._atomic import atomic_open
from .lie_sequence import GROUP_CHOICES, MODEL_LETTER, PAPER

FACTORS = ("base", "paper-coords", "init-low", "init-high", "small-steps", "long")
#: a pose error above this means the run never left the initial plateau (the data's steps are 0.2 .. 0.7)
FAILED = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", default="SO3", choices=GROUP_CHOICES)
    parser.add_argument("--factors", nargs="+", default=list(FACTORS), choices=FACTORS)
    parser.add_argument("--scores", nargs="+", default=["closed_form", "mlp"], choices=["closed_form", "mlp"],
                        help="models: closed_form = G, mlp = C")
    parser.add_argument("--seeds", type=nonnegative_int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=positive_int, default=1000, help="optimiser steps of the base run")
    parser.add_argument("--long-factor", type=positive_int, default=3, help="factor 'long': steps x this")
    parser.add_argument("--init-scales", type=positive_float, nargs=2, default=[0.25, 4.0], metavar=("LOW", "HIGH"),
                        help="factors 'init-low' / 'init-high': G's initial lambda / tau")
    parser.add_argument("--data-scale", type=positive_float, default=0.5,
                        help="factor 'small-steps': the data's step size x this")
    parser.add_argument("--train-size", type=positive_int, default=4000)
    parser.add_argument("--test-size", type=positive_int, default=500)
    parser.add_argument("--batch-size", type=positive_int, default=256)
    parser.add_argument("--threads", type=nonnegative_int, default=1)
    parser.add_argument("--out", default=os.path.join("runs", "lie_sequence_ablation"))
    parser.add_argument("--collect-only", action="store_true",
                        help="only read runs cached under --out (runs of the grid trained by other calls, "
                             "for example one process per factor); missing ones are left out")
    parser.add_argument("--from-results", metavar="FILE", default=None,
                        help="rebuild the grid from the per-seed runs stored in an ablation result file "
                             "(results/lie-sequence-ablation/GROUP.json) written with the same options; "
                             "trains nothing")
    parser.add_argument("--no-progress", action="store_true")
    from .results import add_result_arguments
    add_result_arguments(parser, "GROUP, e.g. SO3")


def _base_args(args) -> argparse.Namespace:
    from . import lie_sequence
    p = argparse.ArgumentParser(add_help=False)
    lie_sequence.add_arguments(p)
    base = p.parse_args(["--group", args.group, "--head", "token", "--score-init", "1"])  # the paper's init
    base.steps, base.train_size, base.test_size, base.batch_size = (args.steps, args.train_size, args.test_size,
                                                                    args.batch_size)
    return base


def factor_args(args, factor: str) -> argparse.Namespace:
    """The ``pyg-lie train lie-sequence`` options of one factor."""
    from ..datasets.lie_sequence import DEFAULT_STEP_STD
    from ..groups import get_group
    a = _base_args(args)
    if factor == "paper-coords":
        a.score_coords = "paper"
    elif factor in ("init-low", "init-high"):
        a.score_init = args.init_scales[0 if factor == "init-low" else 1]
    elif factor == "small-steps":
        blocks = get_group(args.group).blocks
        a.step_std = [(b, args.data_scale * DEFAULT_STEP_STD.get(b, 0.2)) for b in blocks]
    elif factor == "long":
        a.steps = args.steps * args.long_factor
    elif factor != "base":
        raise ValueError(f"factor must be one of {FACTORS}, got {factor!r}")
    return a


def _applies(factor: str, score: str) -> bool:
    return not (factor.startswith("init") and score != "closed_form")


def run_grid(args) -> Dict[str, Dict[str, List[dict]]]:
    """``{factor: {score: [run, ...]}}``, trained or read from the cache."""
    from .lie_sequence import run_one
    folder = os.path.join(args.out, args.group)
    os.makedirs(folder, exist_ok=True)
    grid: Dict[str, Dict[str, List[dict]]] = {}
    for factor in args.factors:
        for score in args.scores:
            if not _applies(factor, score):
                continue
            for seed in args.seeds:
                path = os.path.join(folder, f"{factor}_{MODEL_LETTER[score]}_{seed}.json")
                if os.path.exists(path):
                    with open(path) as f:
                        run = json.load(f)
                elif getattr(args, "collect_only", False):
                    continue
                else:
                    run = run_one(args.group, score, seed, factor_args(args, factor), progress=not args.no_progress)
                    run = {k: v for k, v in run.items() if k != "losses"} | {"losses": run["losses"][::10]}
                    with atomic_open(path, "w") as f:  # read back by the next run: never half written
                        json.dump(run, f)
                print(f"{args.group} {factor:12s} {MODEL_LETTER[score]} seed {seed}: pose error "
                      f"{run['pose_error']:.2e}, final loss {run['final_loss']:.2e}, {run['train_time_s']:.0f} s",
                      flush=True)
                grid.setdefault(factor, {}).setdefault(score, []).append(run)
    return grid


#: options of an ablation result file that must equal the command's for --from-results
_GRID_OPTIONS = ("group", "steps", "long_factor", "init_scales", "data_scale", "train_size", "test_size", "batch_size")


def grid_from_result(args) -> Dict[str, Dict[str, List[dict]]]:
    """``{factor: {score: [run, ...]}}`` of the factors, models and seeds asked for, from the
    ``runs`` field of the result file ``args.from_results``."""
    path = args.from_results
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"--from-results: cannot read {path!r} as a result file ({err})") from None
    stored = record.get("runs")
    if record.get("experiment") != "lie-sequence-ablation" or not isinstance(stored, dict):
        raise ValueError(f"--from-results: {path!r} holds no per-seed ablation runs (files written before the "
                         f"'runs' field existed are rebuilt by training: the same command without "
                         f"--from-results)")
    config = record.get("config") or {}
    differ = [k for k in _GRID_OPTIONS if config.get(k) != getattr(args, k)]
    if differ:
        raise ValueError(f"--from-results: {path!r} was written with other options: "
                         + ", ".join(f"--{k.replace('_', '-')} {config.get(k)}" for k in differ))
    grid: Dict[str, Dict[str, List[dict]]] = {}
    for factor in args.factors:
        for score in args.scores:
            if not _applies(factor, score):
                continue
            by_seed = {r["seed"]: r for r in stored.get(factor, {}).get(MODEL_LETTER[score], [])}
            missing = [s for s in args.seeds if s not in by_seed]
            if missing:
                raise ValueError(f"--from-results: {path!r} has no run of factor {factor}, model "
                                 f"{MODEL_LETTER[score]}, seed(s) {missing}")
            grid.setdefault(factor, {})[score] = [by_seed[s] for s in args.seeds]
    return grid


def stored_runs(grid) -> Dict[str, Dict[str, List[dict]]]:
    """The ``runs`` field of the result file: seed, pose error and final loss of every run."""
    return {factor: {MODEL_LETTER[score]: [{k: r[k] for k in ("seed", "pose_error", "final_loss")} for r in runs]
                     for score, runs in by_score.items()} for factor, by_score in grid.items()}


@torch.no_grad()
def initial_attention(group: str, score: str, a: argparse.Namespace, num_sequences: int = 200) -> Dict[str, float]:
    """First-layer attention of the freshly initialised model (seed 0) on test sequences:
    ``self``, the mean weight of a token on itself, and ``order_signal``, the mean over tokens
    and heads of ``|sum_j alpha_ij (k_j - k_i)|`` (``k`` the position in the sequence). The
    first layer's output is ``sum_j alpha_ij W [h_j ; w_ij]`` with ``w_ij = (k_j - k_i) xi``, so
    the order signal is the size of what it tells a token about where it sits in the sequence."""
    from torch_geometric.utils import softmax

    from ..datasets.lie_sequence import LieSequenceCompletion
    from ..neighbors import complete_graph
    from ..nn.lie_algebra_attention import relative_log
    from ._lie_sequence_models import make_model
    torch.manual_seed(0)
    model = make_model(group, score, a.hidden, a.layers, a.heads, a.head, a.score_coords, a.score_init).double()
    data = LieSequenceCompletion(group, num_sequences, length=a.length, seed=20_000,
                                 step_std=dict(a.step_std)).batch_all()
    ei = complete_graph(data.batch)
    w, _ = relative_log(model.group, data.g.double(), ei)
    if hasattr(model, "coordinate_scale"):
        w = w * model.coordinate_scale.double()
    alpha = softmax(model.attn[0].compute_score(w), ei[1], num_nodes=data.g.shape[0])  # (E, H)
    dk = (data.order[ei[0]] - data.order[ei[1]]).double()
    signal = torch.zeros(data.g.shape[0], alpha.shape[1], dtype=torch.float64).index_add_(0, ei[1], alpha * dk[:, None])
    return {"self": float(alpha[ei[0] == ei[1]].mean()), "order_signal": float(signal.abs().mean())}


def summarize(grid) -> Dict[str, float]:
    """The metrics of the result file (see the module docstring)."""
    out: Dict[str, float] = {}
    for factor, by_score in grid.items():
        means = {}
        for score, runs in by_score.items():
            e = torch.tensor([r["pose_error"] for r in runs], dtype=torch.float64)
            key = f"{factor}.{MODEL_LETTER[score]}."
            means[score] = float(e.mean())
            out[key + "pose_error"] = float(e.mean())
            out[key + "pose_error_std"] = float(e.std()) if e.numel() > 1 else 0.0
            out[key + "pose_error_max"] = float(e.max())
            out[key + "failed_seeds"] = float((e > FAILED).sum())
            out[key + "final_loss"] = float(torch.tensor([r["final_loss"] for r in runs]).mean())
        if "closed_form" in means and "mlp" in means:
            out[f"{factor}.G_over_C"] = means["closed_form"] / means["mlp"]
    for factor in grid:  # C has no block weights: its runs under init-* are its base runs
        if factor.startswith("init") and f"{factor}.G.pose_error" in out and "base.C.pose_error" in out:
            out[f"{factor}.G_over_C"] = out[f"{factor}.G.pose_error"] / out["base.C.pose_error"]
    return out


def paper_ratio(group: str) -> Dict[str, float]:
    """The paper's base-row numbers: G and C pose errors and their ratio, where it gives both."""
    row = PAPER.get(group, {})
    vals = {}
    for letter in ("G", "C"):
        v = row.get(letter, (None,))[0]
        if isinstance(v, str):
            try:
                v = float(v.lstrip("~"))
            except ValueError:
                v = None
        if v is not None:
            vals[letter] = v
    out = {f"base.{k}.pose_error": v for k, v in vals.items()}
    if len(vals) == 2:
        out["base.G_over_C"] = vals["G"] / vals["C"]
    return out


def plot(grid, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    factors = list(grid)
    fig, ax = plt.subplots(figsize=(1.3 * len(factors) + 2, 3.8))
    for k, (score, color) in enumerate((("closed_form", "C0"), ("mlp", "C1"))):
        for i, factor in enumerate(factors):
            runs = grid[factor].get(score)
            if not runs:
                continue
            x = i + (k - 0.5) * 0.3
            e = [r["pose_error"] for r in runs]
            ax.bar(x, sum(e) / len(e), 0.3, color=color, alpha=0.6,
                   label=f"{MODEL_LETTER[score]} ({score})" if i == 0 else None)
            ax.plot([x] * len(e), e, "k.", ms=4)
    ax.set_xticks(range(len(factors)))
    ax.set_xticklabels(factors, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel("pose error (mean; dots: seeds)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    from ..training import require_single_process
    require_single_process("lie-sequence-ablation")
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    from_results = getattr(args, "from_results", None)
    grid = grid_from_result(args) if from_results else run_grid(args)
    os.makedirs(args.out, exist_ok=True)  # the plot's folder (no run cache is read with --from-results)
    if not grid:
        print(f"no runs under {os.path.join(args.out, args.group)}; run without --collect-only")
        return 1
    metrics = summarize(grid)
    for factor, by_score in grid.items():
        for score in by_score:
            init = initial_attention(args.group, score, factor_args(args, factor))
            key = f"{factor}.{MODEL_LETTER[score]}."
            metrics.update({key + "init_self_attention": init["self"], key + "init_order_signal": init["order_signal"]})
    for factor in grid:
        print(f"{factor:12s} " + "  ".join(f"{MODEL_LETTER[s]} {metrics[f'{factor}.{MODEL_LETTER[s]}.pose_error']:.2e}"
                                          for s in grid[factor]))
    path = os.path.join(args.out, f"{args.group}_ablation.png")
    plot(grid, path, f"{args.group}: one factor at a time, seeds {' '.join(map(str, args.seeds))}")
    from .results import record_run
    levels = {"init-low": f"init-low {args.init_scales[0]:g}", "init-high": f"init-high {args.init_scales[1]:g}",
              "small-steps": f"data scale {args.data_scale:g}", "long": f"long = {args.long_factor} x steps"}
    notes = "; ".join([f"ablation, one factor at a time from a base of {args.steps} steps of {args.batch_size}, "
                       f"{args.train_size} training sequences, per-token head, the paper's start, "
                       f"{len(args.seeds)} seed(s) (the paper states no budget)"]
                      + [levels[f] for f in grid if f in levels]
                      + (["read from the cached runs of earlier calls with the same options (--collect-only)"]
                         if getattr(args, "collect_only", False) and not from_results else [])
                      + ([f"rebuilt from the runs stored in {from_results} (--from-results)"] if from_results else []))
    record_run(args, "lie-sequence-ablation", args.group, ["train", "lie-sequence-ablation"], metrics=metrics,
               paper=paper_ratio(args.group), setting=notes, wall_time_s=time.time() - t0,
               seed=list(args.seeds), plots=[path], extra={"runs": stored_runs(grid)})
    return 0
