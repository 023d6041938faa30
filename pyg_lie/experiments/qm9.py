r"""``pyg-lie train qm9``: LieTransformer-T3 / SE3 on QM9 (paper Sec. 5.2), with a SchNet baseline.

Data: the real QM9 built offline from the ``qm9pack`` package
(:class:`pyg_lie.datasets.QM9`, ``--source qm9pack``, the default; install with
``pip install pyg-lie[qm9]``; the first call processes it into
``ROOT/processed`` in about a minute) or PyG's own
:class:`torch_geometric.datasets.QM9` (``--source pyg``: an existing
``ROOT/raw`` / ``ROOT/processed``, or ``--synthetic N``, a tiny synthetic
``raw/qm9_v3.pt`` in PyG's format for offline demos).

Inputs from :class:`~pyg_lie.datasets.QM9Transform` (one-hot-by-type
``[1, c, c^2]``, learnably embedded by the model's first linear layer; positions;
no bonds), one target selected by name in the paper's units, the Cormorant
split (100,000 / 17,748 / 13,083, seed ``--split-seed``, saved as
``OUT/split.pt``) or PyG's example split; ``--max-train`` keeps the first ``N``
training molecules of the split.  L1 loss on standardised targets (train-split
mean and std), Adam, cosine schedule; the test MAE is reported in the paper's
units next to Table 2, and written to ``results/qm9/<run>.json``.

``--baseline schnet`` trains :class:`torch_geometric.nn.models.SchNet` (small:
``--baseline-hidden`` channels and filters, ``--baseline-interactions`` blocks,
cutoff 10 Angstrom, graphs built in plain torch) on the same split with the same loss, optimiser,
schedule, batch size and epochs, and reports its test MAE beside the
LieTransformer's; ``--baseline dimenet++`` does the same with PyG's DimeNet++ at its
defaults (:class:`~pyg_lie.experiments.qm9_models.DimeNetPlusPlusQM9`).

Invariance: ``--augment so3`` rotates every training molecule by a random rotation (the
paper's T3 row); every result reports, beside the test MAE, the rotation sensitivity: the
standard deviation of the prediction over 8 random rotations of each of the first
``--sensitivity-molecules`` test molecules, in the target's unit (0 for an exactly
rotation-invariant model). ``--target all`` trains one model per target of the paper's
Table 2, one after the other, each in ``OUT/<target>``.

``--preset paper`` is Appendix I.2: ``d_v = 848``, 8 heads, 13 layers (T3) or 30
(SE3, 2 Haar lifts), linear-concat-linear content, identity location
(``vee(log(g_i^-1 g_j))`` itself), MLP combination, a single linear layer and
global mean pooling as the head (a linear map commutes with the mean, so
"linear then pool" is ``head_layers=1``), all atoms as the neighbourhood with 25
uniformly sampled (T3; the paper's 50-point neighbourhood holds every atom, as QM9
molecules have at most 29) or, for SE3, the 25 nearest lifted points in the log-map
distance with 20 sampled from them (``LieTransformer(lift_neighbors=25,
max_num_neighbors=20)``), Adam with learning rate 3e-4, batch 75, 500 epochs.
``--preset cpu`` is that architecture narrowed to 6 layers of width 96 (about SchNet's
parameter count). Any option given explicitly overrides the preset (``--preset paper
--hidden 96 --layers 6`` is ``--preset cpu``). ``--lift finite`` (SE3) lifts every atom
by the tetrahedral group (12 rotations; ``--lift-samples`` 24 or 60 for the octahedral
or icosahedral group) and keeps all 25 nearest lifted points, so the model is exactly
invariant to that group and every translation; ``--lift grid`` turns that group by a
random rotation per atom. The paper's kernel width for QM9 is not stated
(``--kernel-dim``, default 16).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Dict

import torch
import torch.distributed as dist
from torch import nn

from ..cli.types import nonnegative_float, nonnegative_int, positive_int
from ..datasets.qm9 import PAPER_MAE, QM9Transform, cormorant_split, pyg_split, write_synthetic_raw
from .qm9_models import (PRESETS, SE3_NEIGHBORS, MoleculeRadiusGraph, build_dimenet, build_schnet, random_rotations,
                         rotate, rotation_sensitivity)
from ..training import (AMP_DTYPES, DistEnv, add_amp_argument, all_reduce_sum, cleanup, eval_loader, fit,
                        init_distributed, seed_everything, unwrap, wrap_model)


_MODEL_KEYS = ("hidden", "heads", "content", "location", "combine", "head_layers")
_PAPER = PRESETS["paper"]  # the model presets live in qm9_models; the training values are this command's
PAPER_PRESET = {  # Appendix I.2; the group-specific entries are filled in by resolve_preset
    **{k: _PAPER[k] for k in _MODEL_KEYS}, "radius": None, "batch_size": 75, "lr": 3e-4, "epochs": 500,
}
PAPER_GROUP = {"T3": {"layers": _PAPER["layers"]["T3"], "lift_samples": 1,
                      "max_neighbors": _PAPER["max_neighbors"]["T3"]},
               "SE3": {"layers": _PAPER["layers"]["SE3"], "lift_samples": 2,
                       "max_neighbors": SE3_NEIGHBORS["sample"]["haar"]}}
SMALL_PRESET = {**{k: PRESETS["small"][k] for k in _MODEL_KEYS}, "radius": None, "batch_size": 75, "lr": 3e-4,
                "epochs": 2, "layers": PRESETS["small"]["layers"], "lift_samples": None, "max_neighbors": None}
CPU_PRESET = {**PAPER_PRESET, "hidden": PRESETS["cpu"]["hidden"], "layers": PRESETS["cpu"]["layers"], "epochs": 14}
#: the targets of the paper's Table 2 (``--target all``)
ALL_TARGETS = ("mu", "alpha", "homo", "lumo", "gap", "r2", "zpve", "U0", "U", "H", "G", "Cv")
_PRESET_KEYS = tuple(SMALL_PRESET)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=str, default="data/QM9", help="data set root (processed/ goes there)")
    p.add_argument("--source", choices=["qm9pack", "pyg"], default=None,
                   help="qm9pack (default): real QM9 built offline from the qm9pack package (pip install "
                        "pyg-lie[qm9]); pyg (default with --synthetic): torch_geometric.datasets.QM9 in ROOT")
    p.add_argument("--max-molecules", type=positive_int, default=None,
                   help="qm9pack source: build only the first N molecules (smoke runs)")
    p.add_argument("--synthetic", type=positive_int, default=None, metavar="N",
                   help="pyg source: write a tiny synthetic raw/qm9_v3.pt with N molecules into --root "
                        "(offline demo/test)")
    p.add_argument("--target", type=str, default="homo",
                   help="homo, lumo, gap, U0, mu, alpha, ... (paper units); all: the 12 targets of Table 2")
    p.add_argument("--group", choices=["T3", "SE3"], default="T3")
    p.add_argument("--preset", choices=["small", "cpu", "paper"], default="small",
                   help="model and optimiser defaults: small (a quick model), cpu (the paper's architecture at "
                        "width 96 and 6 layers) or paper (Appendix I.2); explicit options override it")
    p.add_argument("--lift", choices=["haar", "finite", "grid"], default="haar",
                   help="SE3 lift: haar (random rotations), finite (the tetrahedral group: exactly invariant to it) "
                        "or grid (that group turned by a random rotation per atom)")
    p.add_argument("--lift-neighbors", type=positive_int, default=None,
                   help="SE3: attend to this many nearest lifted points in the log-map distance (default 25, the "
                        "paper's; --max-neighbors then samples among them)")
    p.add_argument("--augment", choices=["none", "so3"], default="none",
                   help="so3: rotate every training molecule by a random rotation (the paper's T3 row)")
    p.add_argument("--sensitivity-molecules", type=nonnegative_int, default=1000,
                   help="test molecules for the rotation sensitivity (std of the prediction over 8 random "
                        "rotations; 0: skip)")
    p.add_argument("--split", choices=["cormorant", "pyg"], default="cormorant")
    p.add_argument("--split-seed", type=nonnegative_int, default=0)
    p.add_argument("--max-train", "--limit-train", dest="max_train", type=positive_int, default=None,
                   help="use only the first N molecules of the training split")
    p.add_argument("--max-valid", type=positive_int, default=None,
                   help="evaluate each epoch on only the first N validation molecules")
    p.add_argument("--limit-eval", type=positive_int, default=None,
                   help="use only the first N valid/test molecules")
    p.add_argument("--epochs", type=positive_int, default=None, help="small: 2, paper: 500")
    p.add_argument("--batch-size", type=positive_int, default=None, help="global batch (both presets: 75)")
    p.add_argument("--lr", type=nonnegative_float, default=None, help="both presets: 3e-4")
    p.add_argument("--hidden", type=positive_int, default=None, help="d_v (small: 64, paper: 848)")
    p.add_argument("--layers", type=nonnegative_int, default=None, help="small: 2, paper: 13 (T3), 30 (SE3)")
    p.add_argument("--heads", type=positive_int, default=None, help="small: 4, paper: 8")
    p.add_argument("--content", choices=["dot_product", "linear_concat_linear"], default=None,
                   help="content attention (small: dot_product, paper: linear_concat_linear)")
    p.add_argument("--location", choices=["mlp", "identity"], default=None,
                   help="location attention (small: mlp, paper: identity)")
    p.add_argument("--combine", choices=["additive", "mlp", "multiplicative"], default=None,
                   help="combination of content and location (small: additive, paper: mlp)")
    p.add_argument("--kernel-dim", type=positive_int, default=16, help="width of the attention kernel MLPs")
    p.add_argument("--head-layers", type=positive_int, default=None,
                   help="linear maps of the output head (small: 3, paper: 1 = linear then pool)")
    p.add_argument("--lift-samples", type=positive_int, default=None, help="default 1 (T3), 2 (SE3, as the paper)")
    p.add_argument("--radius", type=float, default=None, help="neighbourhood radius in Angstrom (None: all atoms)")
    p.add_argument("--max-neighbors", type=positive_int, default=None,
                   help="uniformly subsample lifted neighbourhoods (paper: 25 for T3, 20 for SE3)")
    p.add_argument("--normalization", choices=["softmax", "constant"], default="softmax")
    p.add_argument("--baseline", choices=["none", "schnet", "dimenet++"], default="none",
                   help="also train PyG's SchNet (small, see --baseline-hidden) or DimeNet++ (its defaults) the "
                        "same way and report both MAEs")
    p.add_argument("--baseline-hidden", type=positive_int, default=64,
                   help="SchNet hidden channels and filters (PyG default 128)")
    p.add_argument("--baseline-interactions", type=positive_int, default=3,
                   help="SchNet interaction blocks (PyG default 6)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--num-workers", type=nonnegative_int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument("--threads", type=nonnegative_int, default=1,
                   help="torch intra-op threads per process (0: torch's default; 1 is often faster on a "
                        "machine shared with other work; raise it on a large idle machine)")
    p.add_argument("--out", type=str, default="runs/qm9")
    p.add_argument("--resume", type=str, default=None, help="checkpoint to continue from ('auto': OUT/checkpoint.pt)")
    p.add_argument("--time-budget", type=nonnegative_float, default=None, metavar="MIN",
                   help="per model: stop training at the first epoch that ends past MIN minutes and test there "
                        "(the epochs done are recorded)")
    p.add_argument("--stop-after", type=positive_int, default=None,
                   help="stop after this many epochs of this invocation")
    p.add_argument("--no-progress", action="store_true")
    add_amp_argument(p)
    from .results import add_result_arguments
    add_result_arguments(p, "TARGET-GROUP-PRESET-nN_TRAIN, e.g. homo-T3-paper-n10000")


def resolve_preset(args: argparse.Namespace) -> argparse.Namespace:
    """Fill every option left at ``None`` from ``--preset`` (explicit options win); returns ``args``."""
    if getattr(args, "_resolved", False):
        return args
    values = dict(SMALL_PRESET)
    preset = getattr(args, "preset", "small")
    if preset in ("paper", "cpu"):
        values.update(PAPER_PRESET)
        values.update(PAPER_GROUP[args.group])
    if preset == "cpu":
        values.update({k: CPU_PRESET[k] for k in ("hidden", "layers", "epochs")})
    if args.group == "SE3":
        lift = getattr(args, "lift", "haar")
        if lift != "haar" and values.get("lift_samples") in (None, 2):
            values["lift_samples"] = 12  # the tetrahedral group
        if getattr(args, "lift_neighbors", None) is None:
            args.lift_neighbors = SE3_NEIGHBORS["nearest"]
        values["max_neighbors"] = SE3_NEIGHBORS["sample"][lift]
    for k in _PRESET_KEYS:
        if getattr(args, k, None) is None:
            setattr(args, k, values[k])
    args._resolved = True
    return args


def paper_setting(group: str) -> Dict[str, object]:
    """The paper's values of the options (for ``setting_text``)."""
    return {**PAPER_PRESET, **PAPER_GROUP[group], "split": "cormorant", "max_train": 100_000, "group": group}


def build_model(args: argparse.Namespace, in_channels: int) -> nn.Module:
    """LieTransformer-T3 (one lift) or -SE3 (``args.lift``, with the log-map neighbourhood of
    ``args.lift_neighbors``) with one scalar output."""
    from ..models.lie_transformer import LieTransformer
    lift = getattr(args, "lift", "haar") if args.group == "SE3" else "haar"
    k = getattr(args, "lift_samples", None) or (1 if args.group == "T3" else 2 if lift == "haar" else 12)
    attn = {key: getattr(args, key) for key in ("content", "location", "combine") if getattr(args, key, None)}
    if getattr(args, "kernel_dim", None):
        attn["kernel_dim"] = args.kernel_dim
    nearest = getattr(args, "lift_neighbors", None) if args.group == "SE3" else None
    return LieTransformer(args.group, in_channels, args.hidden, 1, num_layers=args.layers, heads=args.heads,
                          lift_samples=k, radius=None if nearest else args.radius, lift=lift,
                          max_num_neighbors=args.max_neighbors, lift_neighbors=nearest,
                          normalization=args.normalization, head_layers=getattr(args, "head_layers", None) or 3,
                          **attn)


_MoleculeGraph = MoleculeRadiusGraph  # the name of earlier releases


def build_baseline(args: argparse.Namespace) -> nn.Module:
    """``--baseline``: a small :class:`torch_geometric.nn.models.SchNet` or DimeNet++ at its defaults
    (one output, ``forward(z, pos, batch)``)."""
    if getattr(args, "baseline", "schnet") == "dimenet++":
        return build_dimenet()
    return build_schnet(args.baseline_hidden, args.baseline_interactions, 10.0)


def load_qm9(args: argparse.Namespace, env: DistEnv, transform: QM9Transform):
    """The data set of ``--source`` (rank 0 processes first, the others wait and load)."""
    if args.source is None:
        args.source = "pyg" if args.synthetic is not None else "qm9pack"
    if args.synthetic is not None and args.source != "pyg":
        raise ValueError("--synthetic writes PyG's raw format: add --source pyg")
    if args.max_molecules is not None and args.source != "qm9pack":
        raise ValueError("--max-molecules applies to --source qm9pack only")
    if args.source == "qm9pack":
        from ..datasets.qm9_real import QM9

        def make():
            return QM9(args.root, transform=transform, max_molecules=args.max_molecules)
    else:
        from torch_geometric.datasets import QM9 as PyGQM9

        def make():
            return PyGQM9(args.root, transform=transform)

        raw = os.path.join(args.root, "raw", "qm9_v3.pt")
        if args.synthetic is not None and env.is_main:
            if os.path.exists(raw) and not os.path.exists(os.path.join(args.root, "raw", ".synthetic")):
                raise ValueError(f"{raw} exists and is not synthetic; drop --synthetic or choose another --root")
            if not os.path.exists(raw):
                write_synthetic_raw(args.root, args.synthetic, seed=args.split_seed)
                open(os.path.join(args.root, "raw", ".synthetic"), "w").close()
    if env.is_main:
        ds = make()
    if env.distributed:
        dist.barrier()
    if not env.is_main:
        ds = make()
    return ds


def _train_one(args, env, net: nn.Module, forward, train, valid, test, mean: float, std: float, out_dir: str,
               desc: str):
    """Train ``net`` (``forward(model, batch) -> (B,)`` standardised prediction) with the run's recipe;
    returns ``(test MAE or None if stopped early, metric rows, seconds)``."""
    from torch_geometric.loader import DataLoader as PyGLoader

    t0 = time.time()
    dev = env.device
    model = wrap_model(net, env)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)

    aug_gen = torch.Generator().manual_seed(args.seed + 17)

    def loss_fn(m: nn.Module, batch) -> torch.Tensor:
        batch = batch.to(dev)
        if getattr(args, "augment", "none") == "so3":  # a random rotation per molecule (the paper's T3 + aug)
            batch.pos = rotate(batch.pos, batch.batch, random_rotations(batch.num_graphs, aug_gen, device=dev))
        return (forward(m, batch) - (batch.y.squeeze(-1) - mean) / std).abs().mean()

    @torch.no_grad()
    def mae(m: nn.Module, data) -> float:
        net_ = unwrap(m)
        net_.eval()
        tot = torch.zeros(2, dtype=torch.float64)
        for batch in eval_loader(data, args.batch_size, env, loader_cls=PyGLoader):
            batch = batch.to(dev)
            pred = forward(net_, batch).double() * std + mean
            err = (pred - batch.y.squeeze(-1).double()).abs()
            tot += torch.stack([err.sum().cpu(), torch.tensor(float(err.numel()))])
        tot = all_reduce_sum(tot, env)
        return float(tot[0] / tot[1].clamp_min(1))

    unit = QM9Transform(args.target).unit

    def evaluate(m: nn.Module, epoch: int) -> Dict[str, float]:
        return {f"valid_mae_{unit}": mae(m, valid)}

    resume = args.resume
    if resume == "auto":
        cand = os.path.join(out_dir, "checkpoint.pt")
        resume = cand if os.path.isfile(cand) else None
    kwargs = dict(epochs=args.epochs, batch_size=min(args.batch_size, len(train) - len(train) % env.world_size),
                  seed=args.seed, out_dir=out_dir, loader_cls=PyGLoader, progress=not args.no_progress,
                  extra={"args": {k: v for k, v in vars(args).items() if not k.startswith("_")}, "mean": mean,
                         "std": std}, desc=desc, loader_kwargs={"num_workers": args.num_workers},
                  amp=AMP_DTYPES[args.amp])
    budget = getattr(args, "time_budget", None)
    if budget is None:
        rows = fit(model, opt, sched, train, env, loss_fn, evaluate, resume=resume, stop_after=args.stop_after,
                   **kwargs)
        if rows and rows[-1]["epoch"] + 1 < args.epochs:
            return None, rows, time.time() - t0
    else:  # one epoch per call, stop at the first epoch boundary past the budget (checkpointed, resumable)
        rows = []
        while True:
            rows = fit(model, opt, sched, train, env, loss_fn, evaluate, resume=resume, stop_after=1, **kwargs)
            resume = os.path.join(out_dir, "checkpoint.pt")
            if not rows or rows[-1]["epoch"] + 1 >= args.epochs:
                break
            if time.time() - t0 > 60 * budget:
                if env.is_main:
                    print(f"{desc}: time budget of {budget} min reached after {rows[-1]['epoch'] + 1} of "
                          f"{args.epochs} epochs; testing this model")
                break
    test_mae = mae(model, test)
    sens = None
    n_sens = min(getattr(args, "sensitivity_molecules", 0) or 0, len(test))
    if n_sens and env.is_main:
        sens = rotation_sensitivity(unwrap(model), forward, PyGLoader(test[:n_sens], batch_size=args.batch_size),
                                    scale=std, seed=args.seed, device=dev)
    return (test_mae, sens), rows, time.time() - t0


def main(args: argparse.Namespace) -> int:
    """``pyg-lie train qm9``; ``--target all`` runs every target of the paper's Table 2 in turn."""
    if args.target != "all":
        return _main_one(args)
    base_out = args.out
    for target in ALL_TARGETS:
        one = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "_resolved"})
        one.target, one.out = target, os.path.join(base_out, target)
        code = _main_one(one)
        if code:
            return code
    return 0


def _main_one(args: argparse.Namespace) -> int:
    resolve_preset(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    env = init_distributed(args.device)
    try:
        t_start = time.time()
        tf = QM9Transform(args.target)
        ds = load_qm9(args, env, tf)
        split = (cormorant_split if args.split == "cormorant" else pyg_split)(len(ds), seed=args.split_seed)
        if args.max_train is not None:
            split["train"] = split["train"][:args.max_train]
        if args.limit_eval is not None:
            split["valid"], split["test"] = split["valid"][:args.limit_eval], split["test"][:args.limit_eval]
        if args.max_valid is not None:
            split["valid"] = split["valid"][:args.max_valid]
        y = ds._data.y[:, tf.column].double() * tf.factor  # raw targets, paper units
        y_train = y[split["train"]]
        mean, std = float(y_train.mean()), float(y_train.std()) if len(y_train) > 1 else 1.0
        std = std if std > 0 else 1.0
        train, valid, test = (ds[split[s]] for s in ("train", "valid", "test"))
        if env.is_main:
            os.makedirs(args.out, exist_ok=True)
            torch.save({"seed": args.split_seed, "split": args.split, **split}, os.path.join(args.out, "split.pt"))
            print(f"QM9 ({args.source}) {args.target} [{tf.unit}] {args.split} split (seed {args.split_seed}): "
                  f"train {len(train)}, valid {len(valid)}, test {len(test)}; train mean {mean:.4g} std {std:.4g}")

        seed_everything(args.seed)
        net = build_model(args, tf.num_features).to(env.device)
        params = sum(p.numel() for p in net.parameters())
        result, rows, secs = _train_one(
            args, env, net, lambda m, b: m(b.x, b.pos, b.batch).squeeze(-1), train, valid, test, mean, std,
            args.out, f"qm9 {args.target} {args.group}")
        if result is None:
            return 0  # stopped early (--stop-after); continue with --resume
        test_mae, sens = result
        base = None
        if args.baseline in ("schnet", "dimenet++"):
            seed_everything(args.seed)
            bnet = build_baseline(args).to(env.device)
            b_name = "SchNet" if args.baseline == "schnet" else "DimeNet++"
            b_res, b_rows, b_secs = _train_one(
                args, env, bnet, lambda m, b: m(b.z, b.pos, b.batch).squeeze(-1), train, valid, test, mean, std,
                os.path.join(args.out, args.baseline), f"qm9 {args.target} {b_name}")
            if b_res is None:
                return 0
            b_mae, b_sens = b_res
            base = {"model": b_name, "test_mae": b_mae, "rotation_sensitivity": b_sens,
                    "params": sum(p.numel() for p in bnet.parameters()), "seconds": b_secs,
                    "epochs_done": b_rows[-1]["epoch"] + 1 if b_rows else 0,
                    "train_loss_first": b_rows[0]["train_loss"] if b_rows else None,
                    "train_loss_last": b_rows[-1]["train_loss"] if b_rows else None}
        paper = {k: v.get(tf.name) for k, v in PAPER_MAE.items()}
        summary = {"target": tf.name, "unit": tf.unit, "group": args.group, "preset": args.preset,
                   "source": args.source, "split": args.split, "split_seed": args.split_seed,
                   "n_train": len(train), "n_valid": len(valid), "n_test": len(test), "epochs": args.epochs,
                   "epochs_done": rows[-1]["epoch"] + 1 if rows else 0,
                   "params": params, "test_mae": test_mae, "rotation_sensitivity": sens, "seconds": secs,
                   "paper_test_mae": paper, "lift": getattr(args, "lift", "haar") if args.group == "SE3" else None,
                   "augment": getattr(args, "augment", "none"),
                   "world_size": env.world_size, "synthetic": args.synthetic is not None,
                   "train_loss_first": rows[0]["train_loss"] if rows else None,
                   "train_loss_last": rows[-1]["train_loss"] if rows else None, "baseline": base}
        if env.is_main:
            with open(os.path.join(args.out, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)
            ref = ", ".join(f"{k} {v}" for k, v in paper.items() if v is not None) or "not in the paper"
            print(json.dumps(summary))
            print(f"test MAE {test_mae:.4g} {tf.unit}  (paper Table 2: {ref} {tf.unit})"
                  + (f"; rotation sensitivity {sens:.4g} {tf.unit}" if sens is not None else ""))
            if base is not None:
                print(f"{base['model']} baseline test MAE {base['test_mae']:.4g} {tf.unit} ({base['params']} "
                      f"parameters)")
            if args.source == "qm9pack" and args.synthetic is None:
                _record(args, summary, time.time() - t_start)
    finally:
        cleanup(env)
    return 0


def _record(args: argparse.Namespace, summary: Dict, wall: float) -> None:
    """``results/qm9/<run>.json``: test MAEs (paper units), the baseline's, the paper's row."""
    from .results import record_run, setting_text
    unit = summary["unit"]
    metrics = {f"test_mae_{unit}": summary["test_mae"], f"rotation_sensitivity_{unit}": summary["rotation_sensitivity"],
               "parameters": summary["params"],
               "epochs": summary["epochs"], "epochs_done": summary["epochs_done"], "n_train": summary["n_train"], "n_test": summary["n_test"],
               "train_loss_first": summary["train_loss_first"], "train_loss_last": summary["train_loss_last"],
               "seconds": summary["seconds"]}
    base = summary["baseline"]
    if base is not None:
        b = "schnet" if base["model"] == "SchNet" else "dimenet"
        metrics.update({f"{b}_test_mae_{unit}": base["test_mae"],
                        f"{b}_rotation_sensitivity_{unit}": base["rotation_sensitivity"], f"{b}_parameters": base["params"],
                        f"{b}_seconds": base["seconds"], f"{b}_epochs_done": base["epochs_done"],
                        f"{b}_train_loss_first": base["train_loss_first"], f"{b}_train_loss_last": base["train_loss_last"]})
    paper_row = "SE3" if args.group == "SE3" else "T3+aug"
    paper = {f"test_mae_{unit}": PAPER_MAE.get(paper_row, {}).get(summary["target"]),
             f"test_mae_{unit}_SE3": PAPER_MAE["SE3"].get(summary["target"]),
             f"test_mae_{unit}_T3_aug": PAPER_MAE["T3+aug"].get(summary["target"])}
    extra = []
    if args.max_molecules is not None:
        extra.append(f"first {args.max_molecules} molecules of QM9 only")
    if args.max_valid is not None or args.limit_eval is not None:
        extra.append(f"validation on {summary['n_valid']} molecules")
    if args.limit_eval is not None:
        extra.append(f"test on {summary['n_test']} molecules")
    for who, done in (("LieTransformer", summary["epochs_done"]),
                      (base["model"] if base is not None else "", base["epochs_done"] if base is not None else None)):
        if done is not None and done < summary["epochs"]:
            extra.append(f"{who} stopped by the time budget after {done} of {summary['epochs']} epochs")
    if args.group == "T3" and getattr(args, "augment", "none") != "so3":
        extra.append("the paper's T3 row is trained with SO(3) augmentation, this run without")
    if args.group == "SE3" and getattr(args, "lift", "haar") != "haar":
        extra.append(f"{args.lift} lift of {args.lift_samples} rotations (the paper: 2 Haar samples)")
    config = {**vars(args), "max_train": summary["n_train"]}  # the training molecules actually used
    setting = setting_text(config, paper_setting(args.group), extra)
    name = f"{summary['target']}-{args.group}-{args.preset}-n{summary['n_train']}"
    if args.group == "SE3" and getattr(args, "lift", "haar") != "haar":
        name += f"-{args.lift}"
    if getattr(args, "augment", "none") == "so3":
        name += "-aug"
    record_run(args, "qm9", name, ["train", "qm9"], metrics=metrics, paper=paper, setting=setting,
               wall_time_s=wall, seed=args.seed,
               plots=[os.path.join(args.out, "learning_curves.png")],
               extra={"split": {"name": args.split, "seed": args.split_seed, "train": summary["n_train"],
                                "valid": summary["n_valid"], "test": summary["n_test"]},
                      "baseline": None if base is None else
                      {"model": "torch_geometric.nn.models.SchNet", "hidden": args.baseline_hidden,
                       "interactions": args.baseline_interactions, "cutoff": 10.0} if base["model"] == "SchNet" else
                      {"model": "torch_geometric.nn.models.DimeNetPlusPlus (defaults)", "cutoff": 5.0}})
