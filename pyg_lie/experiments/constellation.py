r"""``pyg-lie train constellation``: the LieTransformer on constellation counting.

Trains :class:`~pyg_lie.models.LieTransformer` (T2 or SE2; Haar or finite
lifts) on :class:`~pyg_lie.datasets.Constellation` (Hutchinson et al., 2021,
Sec. 5.1): four count heads with classes 0/1/2, summed cross-entropy, Adam.
Writes to ``--out``:

* ``metrics.csv`` / ``checkpoint.pt`` (resumable with ``--resume``);
* ``learning_curves.png``: training loss and test accuracies per epoch;
* ``results.md`` / ``results.json``: accuracy on ``D_test``, ``D_test^{T2}``,
  ``D_test^{SE2}`` and the measured invariance errors;
* ``invariance_vs_lifts.png``: SE(2) invariance error against the number of
  lift samples (the paper's Figure 3, left), Haar and finite ``C_K`` lifts.

Accuracy is the mean over the four heads of the fraction of correct counts
(``acc``); ``exact`` is the fraction of clouds with all four counts right.
The invariance error of a model ``f`` under a group is
``mean_b ||f(u_b x_b) - f(x_b)|| / mean_b ||f(x_b)||`` over test clouds with
one random element ``u_b`` each (logits, evaluation mode).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Dict, List, Optional

import torch
from torch import Tensor

from ..cli.types import nonnegative_float, nonnegative_int, positive_float, positive_int
from ._planar import augment as _augment

__all__ = ["add_arguments", "main", "run_demo", "evaluate_accuracy", "invariance_error"]

PAPER = {"T2": {"test": 0.75, "test_SE2": 0.63}, "SE2": {"test": 0.71, "test_SE2": 0.69},
         "SetTransformer": {"test": 0.58, "test_SE2": 0.44}}
#: Table 1 accuracies by (model, training augmentation): D_train, D_train^SE2 (the paper's rows we have)
PAPER_TABLE1 = {
    ("T2", "none"): {"test_acc": 0.75, "test_SE2_acc": 0.63},
    ("T2", "SE2"): {"test_SE2_acc": 0.70},
    ("SE2", "none"): {"test_acc": 0.71, "test_SE2_acc": 0.69},
    ("SE2", "SE2"): {"test_SE2_acc": 0.72},
    ("SetTransformer", "none"): {"test_acc": 0.58, "test_SE2_acc": 0.44},
}
#: Appendix I.1: the SetTransformer baseline (8 encoder and 8 decoder blocks, 4 heads, 1075k parameters)
PAPER_SET_TRANSFORMER = {"layers": 8, "heads": 4}
#: Appendix I.1: the paper's data, model and optimiser
PAPER_SETTING = {"num_train": 10000, "num_test": 1000, "data": "official", "features": "constant",
                 "hidden": 128, "layers": 10, "heads": 8, "kernel_dim": 12, "lift_samples": 1,
                 "lr": 1e-4, "betas": [0.5, 0.9], "batch_size": 32, "schedule": "constant"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..training.trainer import add_amp_argument

    p.add_argument("--model", choices=["lietransformer", "settransformer"], default="lietransformer",
                   help="the LieTransformer, or the paper's SetTransformer baseline (permutation invariant "
                        "only; --hidden, --layers encoder and decoder blocks each, --heads; --group and the "
                        "lift options are ignored)")
    p.add_argument("--group", choices=["T2", "SE2"], default="SE2", help="symmetry group of the model")
    p.add_argument("--lift", choices=["haar", "finite"], default="haar", help="Haar samples or C_K lift")
    p.add_argument("--lift-samples", type=positive_int, default=1, help="K, lifts per point")
    p.add_argument("--num-train", type=positive_int, default=10000)
    p.add_argument("--num-test", type=positive_int, default=1000)
    p.add_argument("--data-seed", type=nonnegative_int, default=0, help="train seed; test uses +1, T2/SE2 copies +2/+3")
    p.add_argument("--data", choices=["uniform", "official"], default="uniform",
                   help="uniform: counts uniform on 0/1/2, Haar orientations, random sizes (the issue's "
                        "generator); official: the official code's distribution behind the paper's Table 1 "
                        "(Binomial(2, 1/2) counts, orientations within +-60 degrees, five-point L)")
    p.add_argument("--hidden", type=positive_int, default=128, help="feature dimension d_v (paper: 128)")
    p.add_argument("--layers", type=nonnegative_int, default=10, help="LieTransformer blocks (paper: 10)")
    p.add_argument("--heads", type=positive_int, default=8, help="attention heads (paper: 8)")
    p.add_argument("--kernel-dim", type=positive_int, default=12, help="location-MLP width (paper: 12)")
    p.add_argument("--kernel-per-head", action="store_true",
                   help="one location MLP per head, as the official code (default: one shared MLP with an "
                        "output per head, a quarter of the work)")
    p.add_argument("--mlp-ratio", type=positive_float, default=1.0,
                   help="hidden width of each block's pointwise MLP / d_v (the official code: 1, "
                        "which gives the paper's ~1.05M parameters at d_v=128, 10 layers)")
    p.add_argument("--radius", type=float, default=None, help="base neighbourhood radius (default: all pairs)")
    p.add_argument("--features", choices=["constant", "pairwise_distances"], default="constant",
                   help="point features: constant f_i = 1 (the paper's text) or each point's distances to "
                        "the other points of its cloud, sorted (the official code's default content_type)")
    p.add_argument("--content", default="dot_product", choices=["dot_product", "linear_concat_linear"])
    p.add_argument("--combine", default="additive", choices=["additive", "mlp", "multiplicative"])
    p.add_argument("--normalization", default="constant", choices=["softmax", "constant"],
                   help="constant (mean) normalisation: with the constant input features x_i = 1 softmax "
                        "attention averages identical values and cannot see the geometry")
    p.add_argument("--epochs", type=positive_int, default=100)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--lr", type=nonnegative_float, default=1e-4)
    p.add_argument("--betas", type=float, nargs=2, default=(0.5, 0.9), help="Adam betas (paper: 0.5 0.9)")
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant",
                   help="learning rate after warm-up: constant (paper) or cosine decay to 0 at --epochs; "
                        "with --time-limit the cosine is fitted to the epochs that fit in the limit")
    p.add_argument("--warmup-epochs", type=nonnegative_int, default=0, help="linear learning-rate warm-up (epochs)")
    p.add_argument("--grad-clip", type=positive_float, default=None, help="clip the gradient norm to this value")
    p.add_argument("--augment", choices=["none", "T2", "SE2"], default="none",
                   help="random augmentation of every training batch (D_train^T2 / D_train^SE2)")
    p.add_argument("--eval-every", type=positive_int, default=1, help="evaluate every this many epochs")
    p.add_argument("--time-limit", type=positive_float, default=None,
                   help="stop (with a checkpoint) after this many minutes; continue with --resume")
    p.add_argument("--invariance-lifts", type=positive_int, nargs="*", default=[1, 2, 3, 4, 8, 16],
                   help="lift sample counts of the invariance-error curve")
    p.add_argument("--invariance-clouds", type=positive_int, default=200, help="test clouds for invariance errors")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads (on a machine shared with other work, 1 is often faster)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seed", type=nonnegative_int, default=0, help="model init / data order seed")
    p.add_argument("--out", default="runs/constellation", help="output folder")
    p.add_argument("--resume", default=None, help="checkpoint to continue from")
    p.add_argument("--init-from", default=None,
                   help="checkpoint whose model weights start this run, with a fresh optimiser and "
                        "schedule (a warm restart; the architecture arguments must match)")
    p.add_argument("--no-progress", action="store_true", help="disable tqdm bars")
    add_amp_argument(p)
    from .results import add_result_arguments
    add_result_arguments(p, "GROUP-DATA-aug-AUGMENT, e.g. SE2-official-aug-none")


#: largest cloud per data variant: 2 instances x (3 + 4 + 5 + 4 or 5) corners
MAX_POINTS = {"uniform": 32, "official": 34}


def pairwise_distance_features(pos: Tensor, batch: Tensor, width: int = MAX_POINTS["uniform"] - 1) -> Tensor:
    """``(N, width)``: every point's distances to the other points of its cloud, sorted in
    descending order and zero-padded (invariant under E(2) and point permutations).

    Raises ``ValueError`` when a cloud has more than ``width + 1`` points."""
    from torch_geometric.utils import to_dense_batch
    dense, mask = to_dense_batch(pos, batch)
    m = dense.size(1)
    if m > width + 1:
        raise ValueError(f"pairwise_distance_features: a cloud has {m} points, more than width + 1 = "
                         f"{width + 1}; pass a larger width")
    diff = dense.unsqueeze(2) - dense.unsqueeze(1)
    # the epsilon keeps the gradient of the norm finite at the zero self-distance
    keep = mask.unsqueeze(1) & mask.unsqueeze(2) & ~torch.eye(m, dtype=torch.bool, device=pos.device)
    d = (diff.square().sum(-1) + 1e-12).sqrt() * keep
    d = d.sort(dim=-1, descending=True).values[..., : m - 1][mask]
    return torch.nn.functional.pad(d, (0, width - (m - 1)))


class DistanceFeatureModel(torch.nn.Module):
    """Wraps a point-cloud model ``net(x, pos, batch, num_graphs)``: its point features are
    :func:`pairwise_distance_features` of ``pos`` (``x`` is ignored)."""

    def __init__(self, net: torch.nn.Module, width: int = MAX_POINTS["uniform"] - 1):
        super().__init__()
        self.net, self.width = net, width

    def forward(self, x: Tensor, pos: Tensor, batch: Optional[Tensor] = None,
                num_graphs: Optional[int] = None) -> Tensor:
        if batch is None:
            batch = pos.new_zeros(pos.size(0), dtype=torch.long)
        return self.net(pairwise_distance_features(pos, batch, self.width), pos, batch, num_graphs=num_graphs)


class SetTransformerBaseline(torch.nn.Module):
    """The paper's non-invariant baseline (Lee et al., 2019; Appendix I.1): each point's
    features and raw coordinates embedded linearly, ``layers`` self-attention blocks, pooling
    by multi-head attention onto one seed vector, ``layers`` more blocks on it, and a linear
    read-out; no inducing points. Permutation invariant, neither translation nor rotation
    invariant. The attention blocks are PyG's
    :class:`~torch_geometric.nn.aggr.SetTransformerAggregation`.

    ``forward(x, pos, batch, num_graphs) -> (num_graphs, out_channels)`` like the LieTransformer.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int = 2,
                 heads: int = 4, pos_dim: int = 2):
        super().__init__()
        from torch_geometric.nn.aggr import SetTransformerAggregation
        if hidden_channels % heads:
            raise ValueError(f"hidden_channels ({hidden_channels}) must be a multiple of heads ({heads})")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1 for the SetTransformer, got {num_layers}")
        self.embed = torch.nn.Linear(in_channels + pos_dim, hidden_channels)
        self.set = SetTransformerAggregation(hidden_channels, num_seed_points=1, num_encoder_blocks=num_layers,
                                             num_decoder_blocks=num_layers, heads=heads, layer_norm=True)
        self.out = torch.nn.Linear(hidden_channels, out_channels)

    def forward(self, x: Tensor, pos: Tensor, batch: Optional[Tensor] = None,
                num_graphs: Optional[int] = None) -> Tensor:
        if batch is None:
            batch = pos.new_zeros(pos.size(0), dtype=torch.long)
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if batch.numel() else 0
        h = self.embed(torch.cat([x.to(pos.dtype), pos], dim=-1))
        return self.out(self.set(h, batch, dim_size=num_graphs))


def build_model(args) -> torch.nn.Module:
    from ..models.lie_transformer import LieTransformer
    features = getattr(args, "features", "constant")
    width = MAX_POINTS[getattr(args, "data", "uniform")] - 1
    in_channels = 1 if features == "constant" else width
    if getattr(args, "model", "lietransformer") == "settransformer":
        torch.manual_seed(args.seed)
        net = SetTransformerBaseline(in_channels, args.hidden, 12, num_layers=args.layers, heads=args.heads)
        return net if features == "constant" else DistanceFeatureModel(net, width)
    net = LieTransformer(args.group, in_channels, args.hidden, 12, num_layers=args.layers, heads=args.heads,
                         lift_samples=args.lift_samples, radius=args.radius, lift=args.lift,
                         kernel_dim=args.kernel_dim, content=args.content, combine=args.combine,
                         normalization=args.normalization, mlp_ratio=args.mlp_ratio, seed=args.seed,
                         kernel_per_head=getattr(args, "kernel_per_head", False))
    return net if features == "constant" else DistanceFeatureModel(net, width)


def lr_factor(epoch: int, args) -> float:
    """Learning-rate multiplier after ``epoch`` scheduler steps: linear warm-up over
    ``args.warmup_epochs``, then constant or a cosine that reaches 0 at ``args.epochs``."""
    w = args.warmup_epochs
    if epoch < w:
        return (epoch + 1) / (w + 1)
    if args.schedule == "constant":
        return 1.0
    t = min(1.0, (epoch - w) / max(1, args.epochs - w))
    return 0.5 * (1.0 + math.cos(math.pi * t))


def _loss(model, data) -> Tensor:
    logits = model(data.x, data.pos, data.batch, num_graphs=data.num_graphs).view(-1, 4, 3)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, 3), data.y.view(-1), reduction="mean") * 4


@torch.no_grad()
def evaluate_accuracy(model, dataset, batch_size: int = 64, device="cpu") -> Dict[str, float]:
    """Mean per-head accuracy, exact-match accuracy and loss on ``dataset``."""
    from torch_geometric.loader import DataLoader
    model.eval()
    correct = exact = loss = 0.0
    n = 0
    for data in DataLoader(dataset, batch_size=batch_size):
        data = data.to(device)
        logits = model(data.x, data.pos, data.batch, num_graphs=data.num_graphs).view(-1, 4, 3)
        ok = logits.argmax(-1) == data.y
        correct += ok.float().mean(1).sum().item()
        exact += ok.all(1).float().sum().item()
        loss += 4 * torch.nn.functional.cross_entropy(logits.reshape(-1, 3), data.y.view(-1),
                                                      reduction="sum").item() / 4
        n += data.num_graphs
    return {"acc": correct / n, "exact": exact / n, "loss": loss / n}


@torch.no_grad()
def invariance_error(model, dataset, group: str = "SE2", num_clouds: int = 200, seed: int = 123,
                     batch_size: int = 50, device="cpu") -> float:
    """``mean ||f(u x) - f(x)|| / mean ||f(x)||`` over ``num_clouds`` clouds (eval mode)."""
    from torch_geometric.loader import DataLoader
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    sub = dataset[: min(num_clouds, len(dataset))]
    num = den = 0.0
    for data in DataLoader(sub, batch_size=batch_size):
        data = data.to(device)
        y = model(data.x, data.pos, data.batch, num_graphs=data.num_graphs)
        pos2 = _augment(data.pos.cpu(), data.batch.cpu(), data.num_graphs, group, gen).to(device)
        y2 = model(data.x, pos2, data.batch, num_graphs=data.num_graphs)
        num += (y2 - y).norm(dim=-1).sum().item()
        den += y.norm(dim=-1).sum().item()
    return num / max(den, 1e-30)


def invariance_curve(model, dataset, lifts: List[int], num_clouds: int, device="cpu") -> Dict[str, list]:
    """SE(2) invariance error of the *trained weights* with K Haar / C_K lifts (SE2 models).

    Unlike the paper's Figure 3 (left), which measures freshly initialised models
    (``pyg-lie invariance``), the weights here were trained with one lift count; the
    accuracy on the same clouds (``haar_acc``, ``finite_acc``) shows whether the model
    still works at each K (trained with K = 1, it does not at K >= 2: see the docs).
    """
    from ._planar import swapped_lift
    net = getattr(model, "net", model)  # the LieTransformer inside a DistanceFeatureModel
    sub = dataset[: min(num_clouds, len(dataset))]
    out = {"lifts": list(lifts), "haar": [], "finite": [], "haar_acc": [], "finite_acc": []}
    for K in lifts:
        for mode in ("haar", "finite"):
            with swapped_lift(net, K, mode):
                out[mode].append(invariance_error(model, dataset, "SE2", num_clouds, device=device))
                out[mode + "_acc"].append(evaluate_accuracy(model, sub, device=device)["acc"])
    return out


def plot_invariance(curve: Dict[str, list], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ._planar import save_lift_plot
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    acc_ax = ax.twinx()
    for c, (mode, label) in enumerate((("haar", "Haar lift samples"), ("finite", "finite C_K lift"))):
        vals = [max(v, 1e-12) for v in curve[mode]]
        ax.plot(curve["lifts"], vals, marker="o", color=f"C{c}", label=label)
        if curve.get(mode + "_acc"):
            acc_ax.plot(curve["lifts"], curve[mode + "_acc"], ls="--", marker=".", color=f"C{c}",
                        label=f"accuracy, {label}")
    acc_ax.set_ylim(0, 1)
    acc_ax.set_ylabel("accuracy (dashed)")
    save_lift_plot(fig, ax, path, "SE(2) invariance error", title)


def plot_curves(rows: List[Dict[str, float]], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ep = [r["epoch"] + 1 for r in rows]
    a1.plot(ep, [r["train_loss"] for r in rows], label="train loss")
    ev = [r for r in rows if "test_loss" in r]
    if ev:
        a1.plot([r["epoch"] + 1 for r in ev], [r["test_loss"] for r in ev], label="test loss")
        for key in ("test_acc", "test_T2_acc", "test_SE2_acc"):
            a2.plot([r["epoch"] + 1 for r in ev], [r[key] for r in ev], marker="o", ms=3, label=key)
    a1.set_xlabel("epoch"); a1.set_yscale("log"); a1.legend(fontsize=8); a1.grid(alpha=0.3)
    a2.set_xlabel("epoch"); a2.set_ylabel("mean per-head accuracy"); a2.legend(fontsize=8); a2.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def majority_baseline(train, test) -> float:
    """D_test accuracy of predicting every head's most frequent count in ``train``."""
    ytr, yte = train._data.y.view(-1, 4), test._data.y.view(-1, 4)
    guess = torch.stack([torch.bincount(ytr[:, h], minlength=3).argmax() for h in range(4)])
    return (yte == guess).float().mean().item()


def results_table(res: Dict) -> str:
    g = res["group"]
    label = "SetTransformer" if g == "SetTransformer" else f"LieTransformer-{g}"
    ours = label if g == "SetTransformer" else f"{label} ({res['lift']}, K={res['lift_samples']})"
    lines = [
        "| model | D_test | D_test^T2 | D_test^SE2 | exact (D_test) | inv. err T2 | inv. err SE2 |",
        "|---|---|---|---|---|---|---|",
        f"| {ours} | {res['test']['acc']:.3f} | "
        f"{res['test_T2']['acc']:.3f} | {res['test_SE2']['acc']:.3f} | {res['test']['exact']:.3f} | "
        f"{res['inv_T2']:.2e} | {res['inv_SE2']:.2e} |",
        f"| paper {label} (D_train, official data) | {PAPER[g]['test']:.2f} | "
        f"{PAPER[g]['test']:.2f} | {PAPER[g]['test_SE2']:.2f} | | | |",
    ]
    if "baseline" in res:
        lines.append(f"| majority count per head ({res.get('data', 'uniform')} data) | {res['baseline']:.3f} | | | | | |")
    return "\n".join(lines)


def _init_from(model: torch.nn.Module, path: str) -> None:
    """Load the model weights of checkpoint ``path`` (``--init-from``)."""
    from ..training import load_weights

    load_weights(path, model, "--init-from", hint=" (pass the same --group, --hidden, --layers, --heads, "
                 "--kernel-dim, --mlp-ratio, --features as its run)")
    print(f"model weights from {path}")


def main(args) -> int:
    from torch_geometric.loader import DataLoader

    from ..datasets.constellation import Constellation
    from ..training import AMP_DTYPES, cleanup, fit, init_distributed, seed_everything, wrap_model
    from ..training.ddp import broadcast_object

    torch.set_num_threads(max(1, args.threads))
    env = init_distributed(args.device)
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    data = Constellation.splits(args.num_train, args.num_test, seed=args.data_seed, variant=args.data)
    net = build_model(args).to(env.device)
    nparams = sum(p.numel() for p in net.parameters())
    if args.init_from is not None and args.resume is None:
        _init_from(net, args.init_from)
    if env.is_main:
        print(f"{net!r}\n{nparams} parameters; train {len(data['train'])}, test {len(data['test'])} "
              f"(data {time.time() - t0:.1f} s, {env.world_size} process(es))")
    model = wrap_model(net, env)  # DDP under torchrun: gradients averaged over the ranks
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=tuple(args.betas))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: lr_factor(epoch, args))
    aug_gen = torch.Generator().manual_seed(args.seed + 17)

    def loss_fn(m, batch):
        batch = batch.to(env.device)
        if args.augment != "none":
            batch.pos = _augment(batch.pos.cpu(), batch.batch.cpu(), batch.num_graphs, args.augment,
                                 aug_gen).to(env.device)
        return _loss(m, batch)

    def evaluate(m, epoch):
        row = {}
        for split in ("test", "test_T2", "test_SE2"):
            r = evaluate_accuracy(m, data[split], device=env.device)
            row.update({f"{split}_acc": r["acc"], f"{split}_exact": r["exact"]})
            if split == "test":
                row["test_loss"] = r["loss"]
        return row

    def train(stop_after: Optional[int]) -> List[Dict[str, float]]:
        return fit(model, opt, sched, data["train"], env, loss_fn, evaluate, epochs=args.epochs,
                   batch_size=args.batch_size, seed=args.seed, out_dir=args.out, resume=args.resume,
                   loader_cls=DataLoader, progress=not args.no_progress, eval_every=args.eval_every,
                   grad_clip=args.grad_clip, extra={"args": vars(args)}, desc=f"constellation-{args.group}",
                   stop_after=stop_after, amp=AMP_DTYPES[args.amp])

    # time box: estimate epochs that fit, via fit's stop_after
    stop_after = None
    if args.time_limit is not None:
        t1 = time.time()
        probe = train(1)
        per_epoch = time.time() - t1
        remaining = args.time_limit * 60 - (time.time() - t0)
        stop_after = max(0, int(remaining / max(per_epoch, 1e-3)) - 1)
        if args.schedule == "cosine" and args.resume is None:
            args.epochs = min(args.epochs, len(probe) + stop_after)
        # rank 0's plan for every rank (their clocks differ); the broadcast also waits for rank 0
        # to have written the checkpoint the next call resumes from
        stop_after, args.epochs = broadcast_object((stop_after, args.epochs), env)
        if args.schedule == "cosine" and env.is_main:
            print(f"cosine schedule over {args.epochs} epochs (what fits in {args.time_limit} min)")
        args.resume = os.path.join(args.out, "checkpoint.pt")
    if stop_after is None or stop_after > 0:
        train(stop_after)
    if not env.is_main:  # the final evaluation and the outputs are rank 0's
        cleanup(env)
        return 0
    model = net
    from ..training.logging import read_metrics
    rows = read_metrics(os.path.join(args.out, "metrics.csv"))
    title = f"LieTransformer-{args.group} ({args.lift}, K={args.lift_samples}), {args.num_train} train"
    if args.model == "settransformer":
        title = f"SetTransformer, {args.num_train} train"
    if args.data != "uniform":
        title += f", {args.data} data"
    plot_curves(rows, os.path.join(args.out, "learning_curves.png"), title)

    res = {"group": args.group if args.model == "lietransformer" else "SetTransformer", "lift": args.lift, "lift_samples": args.lift_samples, "data": args.data,
           "epochs_done": int(rows[-1]["epoch"]) + 1 if rows else 0, "parameters": nparams,
           "num_train": args.num_train, "num_test": args.num_test}
    for split in ("test", "test_T2", "test_SE2"):
        res[split] = evaluate_accuracy(model, data[split], device=env.device)
    res["baseline"] = majority_baseline(data["train"], data["test"])
    res["inv_T2"] = invariance_error(model, data["test"], "T2", args.invariance_clouds, device=env.device)
    res["inv_SE2"] = invariance_error(model, data["test"], "SE2", args.invariance_clouds, device=env.device)
    plots = [os.path.join(args.out, "learning_curves.png")]
    if args.group == "SE2" and args.invariance_lifts and args.model == "lietransformer":
        curve = invariance_curve(model, data["test"], args.invariance_lifts, args.invariance_clouds,
                                 device=env.device)
        res["invariance_curve"] = curve
        path = os.path.join(args.out, "invariance_vs_lifts.png")
        plot_invariance(curve, path, f"{title}\ntrained weights, {args.invariance_clouds} test clouds")
        plots.append(path)
    table = results_table(res)
    if "invariance_curve" in res:
        c = res["invariance_curve"]
        table += "\n\n| K | " + " | ".join(map(str, c["lifts"])) + " |\n|---|" + "---|" * len(c["lifts"])
        table += "\n| Haar | " + " | ".join(f"{v:.2e}" for v in c["haar"]) + " |"
        table += "\n| C_K | " + " | ".join(f"{v:.2e}" for v in c["finite"]) + " |"
        table += "\n| accuracy, Haar | " + " | ".join(f"{v:.3f}" for v in c["haar_acc"]) + " |"
        table += "\n| accuracy, C_K | " + " | ".join(f"{v:.3f}" for v in c["finite_acc"]) + " |"
    res["wall_time_s"] = time.time() - t0
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    _record(args, res, rows, plots)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    print(f"epochs: {res['epochs_done']}, wall time {res['wall_time_s']:.0f} s")
    print("plots: " + ", ".join(plots))
    cleanup(env)
    return 0


def _record(args, res: Dict, rows: List[Dict[str, float]], plots: List[str]) -> None:
    """``results/constellation/<run>.json`` (see :mod:`pyg_lie.experiments.results`)."""
    from .results import record_run, setting_text
    metrics = {f"{split}_acc": res[split]["acc"] for split in ("test", "test_T2", "test_SE2")}
    metrics.update(test_exact=res["test"]["exact"], majority_baseline=res["baseline"], inv_T2=res["inv_T2"],
                   inv_SE2=res["inv_SE2"], parameters=res["parameters"], epochs=res["epochs_done"])
    if rows:
        metrics.update(train_loss_first=rows[0]["train_loss"], train_loss_last=rows[-1]["train_loss"])
    curve = res.get("invariance_curve")
    if curve:
        for K, h in zip(curve["lifts"], curve["haar"]):
            metrics[f"inv_SE2_haar_K{K}"] = h
    model = res["group"]
    paper = PAPER_TABLE1.get((model, args.augment), {})
    extra = [f"{res['epochs_done']} epochs (paper: until convergence)"]
    if args.augment == "T2" or (model == "SetTransformer" and args.augment != "none"):
        extra.append("the paper's accuracies of this row are not transcribed here")
    reference = dict(PAPER_SETTING)
    if model == "SetTransformer":
        reference.update(PAPER_SET_TRANSFORMER)
        for k in ("hidden", "kernel_dim", "lift_samples"):
            reference.pop(k)
        extra.append(f"{res['parameters']} parameters (paper 1075k)")
    setting = setting_text(vars(args), reference, extra)
    name = f"{model}-{args.data}-aug-{args.augment}"
    record_run(args, "constellation", name, ["train", "constellation"], metrics=metrics, paper=paper,
               setting=setting, wall_time_s=res["wall_time_s"], seed=args.seed, plots=plots,
               extra={"invariance_curve": curve} if curve else None)


def run_demo(out_dir: str) -> None:
    """A short end-to-end run on CPU (about 2-3 minutes): SE2 model with 2 Haar lifts,
    3000 training clouds, training time-boxed to 2 minutes (the cosine learning-rate
    schedule fitted to the epochs that fit), table and plots in ``out_dir``."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args([
        "--group", "SE2", "--lift", "haar", "--lift-samples", "2", "--num-train", "3000",
        "--num-test", "200", "--hidden", "48", "--layers", "3", "--heads", "4", "--kernel-dim", "12",
        "--epochs", "40", "--lr", "1e-3", "--schedule", "cosine", "--warmup-epochs", "1",
        "--batch-size", "32", "--eval-every", "4",
        "--invariance-lifts", "1", "2", "4", "8", "--invariance-clouds", "60",
        "--time-limit", "2.0", "--no-progress", "--out", out_dir,
        "--results-dir", os.path.join(out_dir, "results")])
    main(args)
