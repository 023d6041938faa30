r"""``pyg-lie train lie-sequence``: sequence completion with Lie-algebra attention.

Reproduces the experiment of Musialski (arXiv 2606.20547, tables 2-4): sequences
``g_k = g_0 exp(k xi)`` of 8 elements, one interior element removed, the other 7
shuffled; predict the missing one. Models (same transformer, 3 layers, 4 heads,
hidden 32): ``closed_form`` (G), ``mlp`` (C), ``vector`` (A, not equivariant).

Reported per model, mean +- std over seeds: pose error
``||log(g_true^{-1} g_pred)||`` on a held-out test set (own seed), equivariance
error ``||log((a pred(g))^{-1} pred(a g))||`` in float64 for random ``a``, score
and total parameter counts. Results go to ``--out/<group>_<score>.json`` plus a
loss-curve plot.

Example (one group, about a minute per model and seed on 2 CPU cores)::

    pyg-lie train lie-sequence --group SE2 --score closed_form --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import time
from typing import Tuple

import torch

from ..cli.types import device_name, nonnegative_float, nonnegative_int, positive_float, positive_int
from ..training._atomic import atomic_open

GROUP_CHOICES = ("SO2", "SE2", "SO3", "SE3", "Aff2", "Aff3")
#: default initial lambda / tau of model G (the paper: 1); measured by ``pyg-lie train lie-sequence-ablation``
SCORE_INIT = 0.25
#: coordinates of the relative logs inside the attention layers (``--score-coords``)
SCORE_COORDS = ("algebra", "paper")
SCORE_CHOICES = ("closed_form", "mlp", "vector")
MODEL_LETTER = {"closed_form": "G", "mlp": "C", "vector": "A"}

# Musialski 2026, tables 2-4: (pose error, equivariance error, score params); strings where
# the summary gives only an order of magnitude, None where it reports nothing.
PAPER = {
    "SE2": {"G": (0.003, 4.0e-10, 36), "C": (0.005, "~float eps", 1932), "A": (0.069, 1.3e-1, None)},
    "SO3": {"G": ("~1e-4", "~1e-14", 24), "C": ("~1e-4", "~1e-14", 1932), "A": (0.067, 7.4e-2, None)},
    "Aff2": {"G": (0.007, "tiny", 60), "C": (0.007, "tiny", 3084), "A": (0.79, 1.29, None)},
}


def block_std(text: str) -> Tuple[str, float]:
    """``--step-std`` item ``BLOCK=STD`` as ``(block, std)``; the data set checks the names."""
    name, sep, val = text.partition("=")
    try:
        std = nonnegative_float(val) if sep and name else None
    except argparse.ArgumentTypeError:
        std = None
    if std is None:
        raise argparse.ArgumentTypeError(f"expects BLOCK=STD with STD a finite number >= 0, such as "
                                         f"translation=0.5, got {text!r}")
    return name, std


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", default="SE2", choices=GROUP_CHOICES)
    parser.add_argument("--score", nargs="+", default=["closed_form"], choices=SCORE_CHOICES,
                        help="model(s): closed_form = G, mlp = C, vector = A")
    parser.add_argument("--seeds", type=nonnegative_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=positive_int, default=4000, help="optimiser steps")
    parser.add_argument("--batch-size", type=positive_int, default=256,
                        help="sequences per step (256 with lr 5e-3 halves G's SE(2)/SO(3) error vs 128 / 3e-3)")
    parser.add_argument("--lr", type=nonnegative_float, default=5e-3,
                        help="peak learning rate of the one-cycle schedule (5%% linear-cosine warmup, cosine decay)")
    parser.add_argument("--train-size", type=positive_int, default=4000)
    parser.add_argument("--test-size", type=positive_int, default=500)
    parser.add_argument("--length", type=positive_int, default=8)
    parser.add_argument("--step-std", type=block_std, nargs="+", default=[], metavar="BLOCK=STD",
                        help="per-block std of the step xi, e.g. translation=0.5 (data set defaults otherwise)")
    parser.add_argument("--hidden", type=positive_int, default=32)
    parser.add_argument("--layers", type=nonnegative_int, default=3)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--head", default="token", choices=["token", "midpoint", "pair"],
                        help="completion head: token = every token proposes g_i exp(delta_i) (the paper's); "
                             "extensions: midpoint = learned choice of a pair, prediction on the geodesic "
                             "midpoint; pair = the same with a learned point c = 1/2 + MLP")
    parser.add_argument("--score-coords", default="algebra", choices=list(SCORE_COORDS),
                        help="coordinates of w_ij that the attention layers (score and value pathway) see: "
                             "algebra = pyg_lie's Frobenius-orthonormal ones (rotation, scale and shear "
                             "coordinates sqrt(2) x the usual ones); paper = rotation angle / rotation vector, "
                             "log-scale and shear as in the paper (those blocks divided by sqrt(2)); the head, "
                             "loss and pose error keep the algebra coordinates")
    parser.add_argument("--score-init", type=positive_float, default=SCORE_INIT,
                        help="model G: initial ratio lambda / tau of every block weight to its head's "
                             "temperature. The paper starts both at softplus(0), a ratio of 1; on this data "
                             "that kernel starts too local and G can stay on its initial plateau (see pyg-lie "
                             "train lie-sequence-ablation), 0.25 starts it wide")
    parser.add_argument("--pair-logit-bound", type=float, nargs=2, default=[2.0, 8.0], metavar=("START", "END"),
                        help="pair heads: bound b of the selection logits b tanh(s / b), raised linearly from "
                             "START to END over the first half of training (soft selection first, so that "
                             "it does not lock onto a wrong pair)")
    parser.add_argument("--pair-logit-ramp", type=nonnegative_float, default=0.5,
                        help="fraction of training over which --pair-logit-bound rises from START to END")
    parser.add_argument("--aux-weight", type=nonnegative_float, default=1.0,
                        help="weight of the per-token proposal loss")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=nonnegative_int, default=1,
                        help="torch threads (0: leave the default; 1 is fastest on a shared CPU)")
    parser.add_argument("--equiv-sequences", type=positive_int, default=64,
                        help="test sequences used for the float64 equivariance error")
    parser.add_argument("--out", default=os.path.join("runs", "lie_sequence"))
    parser.add_argument("--no-progress", action="store_true")
    from .results import add_result_arguments
    add_result_arguments(parser, "GROUP-MODELS-HEAD, e.g. SE2-GCA-token")


#: the paper's model (tables 2-4): sequences of 8, 3 layers x 4 heads x 32, per-token head
PAPER_SETTING = {"length": 8, "hidden": 32, "layers": 3, "heads": 4, "head": "token"}


def paper_numbers(group: str, letter: str, prefix: str = "") -> dict:
    """The paper's pose / equivariance error and score parameters of ``group`` x model ``letter``
    as ``{prefix + metric: number}``; order-of-magnitude entries ("~1e-4") as that power of ten,
    words ("tiny") left out."""
    out = {}
    for key, v in zip(("pose_error", "equivariance_error", "score_params"), PAPER.get(group, {}).get(letter, ())):
        if isinstance(v, str):
            try:
                v = float(v.lstrip("~"))
            except ValueError:
                continue
        if v is not None:
            out[prefix + key] = v
    return out


def model_metrics(agg: dict, runs: list, prefix: str = "") -> dict:
    """The numbers of one model (mean over seeds, with std) for a result file."""
    out = {prefix + k: agg[k] for k in ("pose_error", "pose_error_std", "relative_pose_error", "equivariance_error",
                                        "score_params", "total_params", "final_loss")}
    out[prefix + "seeds"] = len(agg.get("seeds", ()))
    first = [sum(r["losses"][:50]) / max(1, len(r["losses"][:50])) for r in runs if r.get("losses")]
    if first:
        out[prefix + "first_loss"] = sum(first) / len(first)
    return out


def setting_for(args, extra=()) -> str:
    """The setting text: the paper's model and head or how this run differs; the training
    budget, which the paper does not state."""
    from .results import setting_text
    notes = list(extra)
    if getattr(args, "head", "token") != "token":
        notes.append(f"extension: {args.head} completion head (the paper's is per token)")
    if getattr(args, "score_coords", "algebra") != "algebra":
        notes.append("attention in the paper's coordinates (rotation, scale, shear / sqrt(2))")
    if getattr(args, "score_init", 1.0) != 1.0:
        notes.append(f"G's block weights start at {args.score_init:g} x the temperature (paper: 1)")
    notes.append(f"budget (not stated in the paper): {args.steps} steps of {args.batch_size}, "
                 f"{args.train_size} training sequences, {len(args.seeds)} seed(s)")
    return setting_text({"length": 8, **vars(args)}, {k: v for k, v in PAPER_SETTING.items() if k != "head"},
                        notes)


def _subset(data, idx: torch.Tensor):
    """Nodes and targets of sequences ``idx`` of a Batch, as (g, batch, target)."""
    ptr = data.ptr
    counts = ptr[idx + 1] - ptr[idx]
    start = torch.repeat_interleave(ptr[idx], counts)
    off = torch.arange(int(counts.sum())) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    nodes = start + off
    batch = torch.repeat_interleave(torch.arange(idx.numel()), counts)
    return data.g[nodes], batch, data.target[idx]


@torch.no_grad()
def evaluate(model, data, batch_size: int = 256) -> torch.Tensor:
    """Pose errors ``(S,)`` of a model on a Batch of sequences."""
    from ..models import pose_error
    model.eval()
    dev = model.token.device
    errs = []
    S = data.num_graphs
    for s in range(0, S, batch_size):
        idx = torch.arange(s, min(s + batch_size, S))
        g, batch, target = _subset(data, idx)
        out = model(g.to(dev), batch=batch.to(dev))
        errs.append(pose_error(model.group, out.prediction.double(), target.to(dev).double()).cpu())
    return torch.cat(errs)


def step_norms(data) -> torch.Tensor:
    """``||xi||`` per sequence (the natural unit of the pose error)."""
    return data.xi.norm(dim=-1).double()


def run_one(group: str, score: str, seed: int, args, progress: bool = True) -> dict:
    """Train and evaluate one model; returns a dict of metrics."""
    from tqdm import tqdm

    from ..datasets.lie_sequence import LieSequenceCompletion
    from ..models import completion_loss, equivariance_error
    from ._lie_sequence_models import make_model

    dtype = getattr(torch, args.dtype)
    dev = torch.device(args.device)
    step_std = dict(getattr(args, "step_std", []))
    train = LieSequenceCompletion(group, args.train_size, length=args.length, seed=10_000 + seed,
                                  step_std=step_std).batch_all()
    test = LieSequenceCompletion(group, args.test_size, length=args.length, seed=20_000 + seed,
                                 step_std=step_std).batch_all()
    torch.manual_seed(seed)
    model = make_model(group, score, args.hidden, args.layers, args.heads, getattr(args, "head", "token"),
                       getattr(args, "score_coords", "algebra"),
                       getattr(args, "score_init", 1.0)).to(device=dev, dtype=dtype)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    gen = torch.Generator().manual_seed(seed)
    S = train.num_graphs
    losses = []
    t0 = time.time()
    model.train()
    bar = tqdm(range(args.steps), desc=f"{group} {MODEL_LETTER[score]} seed {seed}", disable=not progress,
               leave=False)
    b0, b1 = getattr(args, "pair_logit_bound", (2.0, 8.0))
    ramp = max(1e-9, getattr(args, "pair_logit_ramp", 0.5)) * max(1, args.steps)
    for step in bar:
        model.pair_logit_bound = b0 + (b1 - b0) * min(1.0, step / ramp)
        idx = torch.randperm(S, generator=gen)[:args.batch_size]
        g, batch, target = _subset(train, idx)
        g, batch, target = g.to(dev, dtype), batch.to(dev), target.to(dev, dtype)
        out = model(g, batch=batch)
        loss = completion_loss(model.group, out, g, target, batch, aux_weight=args.aux_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if len(losses) % 50 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / 50:.2e}")
    train_time = time.time() - t0
    err = evaluate(model, test)
    # equivariance error in float64
    m64 = copy.deepcopy(model).to(dtype=torch.float64).eval()
    ne = min(args.equiv_sequences, test.num_graphs)
    g, batch, _ = _subset(test, torch.arange(ne))
    eq = equivariance_error(m64, g.to(dev), batch.to(dev),
                            generator=torch.Generator().manual_seed(30_000 + seed)).cpu()
    return {
        "group": group, "score": score, "model": MODEL_LETTER[score], "seed": seed,
        "pose_error": float(err.mean()), "pose_error_median": float(err.median()),
        "relative_pose_error": float((err / step_norms(test)).mean()),
        "equivariance_error": float(eq.mean()), "equivariance_error_max": float(eq.max()),
        "head": model.head, "score_params": model.num_score_parameters(), "total_params": model.num_parameters(),
        "final_loss": float(sum(losses[-50:]) / max(1, len(losses[-50:]))),
        "train_time_s": train_time, "steps": args.steps, "losses": losses,
    }


def aggregate(runs: list[dict]) -> dict:
    """Mean and std over seeds of the scalar metrics."""
    out = {k: runs[0][k] for k in ("group", "score", "model", "score_params", "total_params")}
    out["head"] = runs[0].get("head", "token")
    out["seeds"] = [r["seed"] for r in runs]
    out["steps"] = runs[0]["steps"]
    for key in ("pose_error", "relative_pose_error", "equivariance_error", "train_time_s", "final_loss"):
        v = torch.tensor([r[key] for r in runs], dtype=torch.float64)
        out[key] = float(v.mean())
        out[key + "_std"] = float(v.std()) if len(runs) > 1 else 0.0
    return out


def plot_losses(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for score, runs in results.items():
        for r in runs:
            ls = torch.tensor(r["losses"])
            k = max(1, len(ls) // 100)
            sm = ls[: len(ls) // k * k].view(-1, k).mean(1)
            ax.plot(torch.arange(sm.numel()) * k, sm, label=f"{MODEL_LETTER[score]} seed {r['seed']}")
    ax.set_yscale("log"); ax.set_xlabel("step"); ax.set_ylabel("training loss")
    ax.set_title(f"{next(iter(results.values()))[0]['group']} sequence completion")
    ax.legend(fontsize=7)
    fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)


def main(args: argparse.Namespace) -> int:
    from ..training import require_single_process
    require_single_process("lie-sequence")
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..groups import GROUPS
    if args.group not in GROUPS:
        raise SystemExit(f"group {args.group} is not available in this installation (have {sorted(GROUPS)})")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    results, metrics, paper = {}, {}, {}
    for score in args.score:
        runs = [run_one(args.group, score, s, args, progress=not args.no_progress) for s in args.seeds]
        agg = aggregate(runs)
        results[score] = runs
        letter = MODEL_LETTER[score]
        metrics.update(model_metrics(agg, runs, f"{letter}."))
        paper.update(paper_numbers(args.group, letter, f"{letter}."))
        path = os.path.join(args.out, f"{args.group}_{score}.json")
        with atomic_open(path, "w") as f:  # read back by pyg-lie summary: never half written
            json.dump({"summary": agg, "runs": runs, "args": {k: v for k, v in vars(args).items()
                                                                if not k.startswith("_")}}, f)
        print(f"{args.group} {MODEL_LETTER[score]} ({score}): pose error {agg['pose_error']:.2e} "
              f"+- {agg['pose_error_std']:.1e}, equivariance error {agg['equivariance_error']:.1e} "
              f"+- {agg['equivariance_error_std']:.1e}, score params {agg['score_params']}, "
              f"total params {agg['total_params']}, {agg['train_time_s']:.0f} s/seed  -> {path}")
    plot = os.path.join(args.out, f"{args.group}_loss.png")
    plot_losses(results, plot)
    from .results import record_run
    name = f"{args.group}-{''.join(MODEL_LETTER[s] for s in args.score)}-{args.head}"
    record_run(args, "lie-sequence", name, ["train", "lie-sequence"], metrics=metrics, paper=paper,
               setting=setting_for(args), wall_time_s=time.time() - t0, seed=list(args.seeds), plots=[plot])
    return 0
