r"""``pyg-lie train qm9``: LieTransformer-T3 / SE3 on :class:`torch_geometric.datasets.QM9` (paper Sec. 5.2).

Inputs from :class:`~pyg_lie.datasets.QM9Transform` (one-hot-by-type
``[1, c, c^2]``, learnably embedded by the model's first linear layer; positions;
no bonds), one target selected by name in the paper's units, the Cormorant
split (or PyG's example split), L1 loss on standardised targets (train-split
mean and std), Adam; the test MAE is reported in the paper's units next to
Table 2.

The real data set cannot be downloaded here.  ``--synthetic N`` writes a tiny
``raw/qm9_v3.pt`` in PyG's own format into ``--root`` (refusing to touch an
existing one) so the whole pipeline, PyG's ``QM9.process`` included, runs
offline.  On a machine with the data (or network) point ``--root`` at it; see
``docs/springs_qm9_ddp.md``.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Dict

import torch
import torch.distributed as dist
from torch import nn

from ..cli.types import nonnegative_float, nonnegative_int, positive_int
from ..datasets.qm9 import PAPER_MAE, QM9Transform, cormorant_split, pyg_split, write_synthetic_raw
from ..training import (AMP_DTYPES, DistEnv, add_amp_argument, all_reduce_sum, cleanup, eval_loader, fit,
                        init_distributed, seed_everything, unwrap, wrap_model)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=str, default="data/QM9", help="PyG QM9 root (raw/ and processed/)")
    p.add_argument("--synthetic", type=positive_int, default=None, metavar="N",
                   help="write a tiny synthetic raw/qm9_v3.pt with N molecules into --root (offline demo/test)")
    p.add_argument("--target", type=str, default="homo", help="homo, lumo, gap, U0, mu, alpha, ... (paper units)")
    p.add_argument("--group", choices=["T3", "SE3"], default="T3")
    p.add_argument("--split", choices=["cormorant", "pyg"], default="cormorant")
    p.add_argument("--split-seed", type=nonnegative_int, default=0)
    p.add_argument("--limit-train", type=positive_int, default=None, help="use only the first N training molecules")
    p.add_argument("--limit-eval", type=positive_int, default=None, help="use only the first N valid/test molecules")
    p.add_argument("--epochs", type=positive_int, default=2, help="paper: 500")
    p.add_argument("--batch-size", type=positive_int, default=75, help="global batch (paper: 75)")
    p.add_argument("--lr", type=nonnegative_float, default=3e-4, help="paper: 3e-4")
    p.add_argument("--hidden", type=positive_int, default=64, help="d_v (paper: 848)")
    p.add_argument("--layers", type=nonnegative_int, default=2, help="paper: 13 (T3), 30 (SE3)")
    p.add_argument("--heads", type=positive_int, default=4, help="paper: 8")
    p.add_argument("--lift-samples", type=positive_int, default=None, help="default 1 (T3), 2 (SE3, as the paper)")
    p.add_argument("--radius", type=float, default=None, help="neighbourhood radius in Angstrom (None: all atoms)")
    p.add_argument("--max-neighbors", type=positive_int, default=None,
                   help="uniformly subsample lifted neighbourhoods (paper: 25 of 50 for T3, 20 of 25 for SE3)")
    p.add_argument("--normalization", choices=["softmax", "constant"], default="softmax")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--num-workers", type=nonnegative_int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default=None)
    p.add_argument("--threads", type=nonnegative_int, default=1,
                   help="torch intra-op threads per process (0: torch's default; 1 is far faster on a busy "
                        "2-core CPU; raise it on a large idle machine)")
    p.add_argument("--out", type=str, default="runs/qm9")
    p.add_argument("--resume", type=str, default=None, help="checkpoint to continue from ('auto': OUT/checkpoint.pt)")
    p.add_argument("--stop-after", type=positive_int, default=None,
                   help="stop after this many epochs of this invocation")
    p.add_argument("--no-progress", action="store_true")
    add_amp_argument(p)


def build_model(args: argparse.Namespace, in_channels: int) -> nn.Module:
    """LieTransformer-T3 (one lift) or -SE3 (Haar lifts) with one scalar output."""
    from ..models.lie_transformer import LieTransformer
    k = args.lift_samples or (1 if args.group == "T3" else 2)
    return LieTransformer(args.group, in_channels, args.hidden, 1, num_layers=args.layers, heads=args.heads,
                          lift_samples=k, radius=args.radius, lift="haar", max_num_neighbors=args.max_neighbors,
                          normalization=args.normalization)


def load_qm9(args: argparse.Namespace, env: DistEnv, transform: QM9Transform):
    """PyG's ``QM9`` (rank 0 processes first, the others wait and load)."""
    from torch_geometric.datasets import QM9

    raw = os.path.join(args.root, "raw", "qm9_v3.pt")
    if args.synthetic is not None and env.is_main:
        if os.path.exists(raw) and not os.path.exists(os.path.join(args.root, "raw", ".synthetic")):
            raise ValueError(f"{raw} exists and is not synthetic; drop --synthetic or choose another --root")
        if not os.path.exists(raw):
            write_synthetic_raw(args.root, args.synthetic, seed=args.split_seed)
            open(os.path.join(args.root, "raw", ".synthetic"), "w").close()
    if env.is_main:
        ds = QM9(args.root, transform=transform)
    if env.distributed:
        dist.barrier()
    if not env.is_main:
        ds = QM9(args.root, transform=transform)
    return ds


def main(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    env = init_distributed(args.device)
    try:
        from torch_geometric.loader import DataLoader as PyGLoader

        tf = QM9Transform(args.target)
        ds = load_qm9(args, env, tf)
        split = (cormorant_split if args.split == "cormorant" else pyg_split)(len(ds), seed=args.split_seed)
        if args.limit_train is not None:
            split["train"] = split["train"][:args.limit_train]
        if args.limit_eval is not None:
            split["valid"], split["test"] = split["valid"][:args.limit_eval], split["test"][:args.limit_eval]
        y = ds._data.y[:, tf.column].double() * tf.factor  # raw targets, paper units
        y_train = y[split["train"]]
        mean, std = float(y_train.mean()), float(y_train.std()) if len(y_train) > 1 else 1.0
        std = std if std > 0 else 1.0
        train, valid, test = (ds[split[s]] for s in ("train", "valid", "test"))
        if env.is_main:
            print(f"QM9 {args.target} [{tf.unit}] {args.split} split: train {len(train)}, valid {len(valid)}, "
                  f"test {len(test)}; train mean {mean:.4g} std {std:.4g}")

        seed_everything(args.seed)
        net = build_model(args, tf.num_features)
        model = wrap_model(net, env)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
        dev = env.device

        def loss_fn(m: nn.Module, batch) -> torch.Tensor:
            batch = batch.to(dev)
            pred = m(batch.x, batch.pos, batch.batch).squeeze(-1)
            return (pred - (batch.y.squeeze(-1) - mean) / std).abs().mean()

        @torch.no_grad()
        def mae(m: nn.Module, data) -> float:
            net_ = unwrap(m)
            net_.eval()
            tot = torch.zeros(2, dtype=torch.float64)
            for batch in eval_loader(data, args.batch_size, env, loader_cls=PyGLoader):
                batch = batch.to(dev)
                pred = net_(batch.x, batch.pos, batch.batch).squeeze(-1).double() * std + mean
                err = (pred - batch.y.squeeze(-1).double()).abs()
                tot += torch.stack([err.sum().cpu(), torch.tensor(float(err.numel()))])
            tot = all_reduce_sum(tot, env)
            return float(tot[0] / tot[1].clamp_min(1))

        def evaluate(m: nn.Module, epoch: int) -> Dict[str, float]:
            return {f"valid_mae_{tf.unit}": mae(m, valid)}

        resume = args.resume
        if resume == "auto":
            cand = os.path.join(args.out, "checkpoint.pt")
            resume = cand if os.path.isfile(cand) else None
        rows = fit(model, opt, sched, train, env, loss_fn, evaluate, epochs=args.epochs,
                   batch_size=min(args.batch_size, len(train) - len(train) % env.world_size), seed=args.seed,
                   out_dir=args.out, resume=resume, loader_cls=PyGLoader, progress=not args.no_progress,
                   extra={"args": vars(args), "mean": mean, "std": std}, desc=f"qm9 {args.target} {args.group}",
                   stop_after=args.stop_after, loader_kwargs={"num_workers": args.num_workers},
                   amp=AMP_DTYPES[args.amp])
        if rows and rows[-1]["epoch"] + 1 < args.epochs:
            return 0
        test_mae = mae(model, test)
        paper = {k: v.get(tf.name) for k, v in PAPER_MAE.items()}
        summary = {"target": tf.name, "unit": tf.unit, "group": args.group, "split": args.split,
                   "n_train": len(train), "n_test": len(test), "epochs": args.epochs,
                   "params": sum(p.numel() for p in net.parameters()), "test_mae": test_mae,
                   "paper_test_mae": paper, "world_size": env.world_size, "synthetic": args.synthetic is not None}
        if env.is_main:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)
            ref = ", ".join(f"{k} {v}" for k, v in paper.items() if v is not None) or "not in the paper"
            print(json.dumps(summary))
            print(f"test MAE {test_mae:.4g} {tf.unit}  (paper Table 2: {ref} {tf.unit})")
    finally:
        cleanup(env)
    return 0
