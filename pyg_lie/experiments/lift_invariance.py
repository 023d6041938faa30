r"""``pyg-lie invariance``: SE(2) invariance error against the number of lift samples.

The protocol of the paper's Figure 3 (left) (Hutchinson et al., 2021, Sec. 5.1), as
the official repository's ``diagnostics/invariance_error.py`` measures it: freshly
initialised LieTransformer-SE2 models (1 block, d_v 8, 2 heads, kernel width 2,
constant input features, constant attention normalisation), in float64 and
evaluation mode, each evaluated with ``K`` lift samples per point. For a cloud ``x``
and a random rotation ``u`` about the origin,

.. math::
    e(x, u) = \max_o |f(u x)_o - f(x)_o|

(the absolute l-infinity norm of the logit change), where the two forward passes
draw their lift samples independently. The table and plot give the median and
quartiles of ``e`` over ``seeds`` models x ``clouds`` clouds x ``elements`` rotations
(and the median relative error ``||f(ux) - f(x)|| / ||f(x)||``). Every ``K`` sees
the same models, clouds and rotations; only the lift samples differ.

Two ways of drawing the ``K`` samples of the stabiliser SO(2) are compared
(``--lift``):

* ``grid`` (the paper's): ``K`` equally spaced angles ``phi + 2 pi k / K`` with one
  uniform random offset ``phi`` per point, a randomly rotated ``C_K``. The stabiliser
  integral is then a shifted trapezoidal rule on the circle; its error falls like a
  power of ``K`` set by the integrand's smoothness (the log's branch cut at angle ``pi``
  is a kink), far faster than Monte Carlo;
* ``haar``: ``K`` independent Haar (uniform) angles per point, what
  :class:`~pyg_lie.nn.Lift` draws with ``mode="haar"``; a plain Monte Carlo estimate
  whose error falls like ``K^{-1/2}``.

This is a property of the architecture, not of training: weights trained with one
lift count and evaluated with another need not follow it (``pyg-lie train
constellation`` records that trained-weights curve; see docs/lie_transformer.md).

Writes ``results.json``, ``results.md`` and ``invariance_vs_lifts.png`` to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from ..cli.types import nonnegative_float, nonnegative_int, positive_int
from ._planar import augment as _augment, save_lift_plot, swapped_lift

__all__ = ["add_arguments", "main", "run_demo", "lift_invariance_curve", "swapped_lift", "grid_stabilizer",
           "LIFT_KINDS"]

#: the official diagnostic's model (``diagnostics/invariance_error.py``)
DIAGNOSTIC_ARCH = {"hidden": 8, "layers": 1, "heads": 2, "kernel_dim": 2}
#: ways of drawing the K stabiliser samples per point (see the module docstring); grid is the paper's
LIFT_KINDS = ("grid", "haar")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lifts", type=positive_int, nargs="+", default=[1, 2, 3, 4, 8, 16, 32],
                   help="numbers of lift samples K")
    p.add_argument("--lift", nargs="+", default=list(LIFT_KINDS), choices=LIFT_KINDS,
                   help="grid: K equally spaced stabiliser angles with a random offset per point (the "
                        "paper's); haar: K independent uniform angles per point (pyg_lie's Lift)")
    p.add_argument("--translation-scale", type=nonnegative_float, default=0.0,
                   help="std of a Gaussian translation added to each rotation (the paper: 0, rotations "
                        "about the origin; translations are exact symmetries of every lift)")
    p.add_argument("--seeds", type=positive_int, default=8, help="freshly initialised models (one per seed)")
    p.add_argument("--clouds", type=positive_int, default=4, help="test clouds per model")
    p.add_argument("--elements", type=positive_int, default=8, help="random SE(2) elements per cloud")
    p.add_argument("--data", choices=["uniform", "official"], default="official",
                   help="constellation generator of the clouds (see pyg-lie train constellation)")
    p.add_argument("--hidden", type=positive_int, default=DIAGNOSTIC_ARCH["hidden"], help="feature dimension d_v")
    p.add_argument("--layers", type=nonnegative_int, default=DIAGNOSTIC_ARCH["layers"], help="LieTransformer blocks")
    p.add_argument("--heads", type=positive_int, default=DIAGNOSTIC_ARCH["heads"], help="attention heads")
    p.add_argument("--kernel-dim", type=positive_int, default=DIAGNOSTIC_ARCH["kernel_dim"], help="location-MLP width")
    p.add_argument("--normalization", default="constant", choices=["softmax", "constant"],
                   help="constant (mean) normalisation, as trained by pyg-lie train constellation; with the "
                        "constant input features softmax attention averages identical values, so the output "
                        "does not depend on the geometry and is exactly invariant for every K")
    p.add_argument("--max-edges", type=positive_int, default=2_000_000,
                   help="largest number of lifted edges per forward pass (copies of a cloud are split)")
    p.add_argument("--threads", type=positive_int, default=2, help="torch threads")
    p.add_argument("--out", default="runs/lift_invariance", help="output folder")
    p.add_argument("--no-progress", action="store_true", help="disable the tqdm bar")
    from .results import add_result_arguments
    add_result_arguments(p, "init-dDV-lLAYERS-NORMALIZATION, e.g. init-d8-l1-constant")


def grid_stabilizer(num_points: int, K: int, generator: Optional[torch.Generator] = None,
                    dtype: torch.dtype = torch.float64) -> Tensor:
    """``(num_points, K, 3, 3)`` SE(2) stabiliser samples of the paper's lift: rotations by
    ``phi + 2 pi k / K``, ``k = 0 .. K-1``, with one uniform offset ``phi`` per point."""
    phi = 2 * math.pi * torch.rand(num_points, 1, generator=generator, dtype=torch.float64)
    theta = phi + 2 * math.pi * torch.arange(K, dtype=torch.float64) / K
    h = torch.zeros(num_points, K, 3, 3, dtype=torch.float64)
    h[..., 0, 0] = h[..., 1, 1] = theta.cos()
    h[..., 1, 0] = theta.sin()
    h[..., 0, 1] = -theta.sin()
    h[..., 2, 2] = 1.0
    return h.to(dtype)


def _errors(net, pos: Tensor, x: Tensor, K: int, elements: int, max_edges: int,
            element_gen: torch.Generator, lift_gen: torch.Generator, lift: str = "haar",
            translation_scale: float = 0.0) -> List[List[float]]:
    """``[[l_inf, relative], ...]`` for ``elements`` random SE(2) elements applied to one cloud."""
    n = pos.size(0)
    per_pass = max(1, max_edges // (n * K) ** 2)
    out = []
    for start in range(0, elements, per_pass):
        c = min(per_pass, elements - start)
        batch = torch.arange(c).repeat_interleave(n)
        p, f = pos.repeat(c, 1), x.repeat(c, 1)
        p2 = _augment(p, batch, c, "SE2", element_gen, translation_scale=translation_scale)
        if lift == "grid":
            h1, h2 = (grid_stabilizer(n * c, K, lift_gen, pos.dtype) for _ in range(2))
        else:
            h1, h2 = (net.group.stabilizer_random(n * c, K, generator=lift_gen, dtype=pos.dtype) for _ in range(2))
        y1 = net(f, p, batch, stabilizer=h1, num_graphs=c)
        y2 = net(f, p2, batch, stabilizer=h2, num_graphs=c)
        d = y2 - y1
        out += torch.stack([d.abs().amax(-1), d.norm(dim=-1) / y1.norm(dim=-1)], -1).tolist()
    return out


def _quartiles(v: Sequence[float]) -> List[float]:
    q = torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)
    return torch.tensor(v, dtype=torch.float64).quantile(q).tolist()


@torch.no_grad()
def lift_invariance_curve(lifts: Sequence[int], seeds: int = 8, clouds: int = 4, elements: int = 8,
                          data: str = "official", hidden: int = 8, layers: int = 1, heads: int = 2,
                          kernel_dim: int = 2, normalization: str = "constant", max_edges: int = 2_000_000,
                          progress: bool = False, lift: str = "haar",
                          translation_scale: float = 0.0) -> Dict[str, list]:
    """Invariance error of freshly initialised float64 LieTransformer-SE2 models against ``K``.

    Every ``K`` sees the same models, clouds and group elements (a paired design); only
    the lift samples differ, drawn as ``lift`` (``"grid"`` or ``"haar"``, module
    docstring).  Returns ``{"lifts", "linf": [[q25, median, q75] per K], "rel": [...]}``:
    quartiles over all ``seeds x clouds x elements`` errors.
    """
    from tqdm.auto import tqdm

    from ..datasets.constellation import Constellation
    from ..models.lie_transformer import LieTransformer
    for name, v in (("seeds", seeds), ("clouds", clouds), ("elements", elements)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if not lifts or min(lifts) < 1:
        raise ValueError(f"lifts must be positive integers, got {list(lifts)}")
    if lift not in LIFT_KINDS:
        raise ValueError(f"lift must be one of {LIFT_KINDS}, got {lift!r}")
    test = Constellation(clouds, seed=10_000, variant=data)
    errs: List[List[List[float]]] = [[] for _ in lifts]
    bar = tqdm(total=seeds * len(lifts), desc="models x K", disable=not progress)
    for s in range(seeds):
        torch.manual_seed(s)
        net = LieTransformer("SE2", 1, hidden, 12, num_layers=layers, heads=heads, kernel_dim=kernel_dim,
                             normalization=normalization).double().eval()
        for i, K in enumerate(lifts):
            element_gen = torch.Generator().manual_seed(s)
            lift_gen = torch.Generator().manual_seed(100_003 * (s + 1) + K)
            with swapped_lift(net, K):
                for d in test:
                    errs[i] += _errors(net, d.pos.double(), d.x.double(), K, elements, max_edges,
                                       element_gen, lift_gen, lift, translation_scale)
            bar.update()
    bar.close()
    return {"lifts": list(lifts), "linf": [_quartiles([e[0] for e in v]) for v in errs],
            "rel": [_quartiles([e[1] for e in v]) for v in errs]}


def is_monotone(curve: Dict[str, list], key: str = "linf") -> bool:
    """Whether the median error strictly falls from each ``K`` to the next."""
    med = [q[1] for q in curve[key]]
    return all(b < a for a, b in zip(med, med[1:]))


_LABEL = {"grid": "equally spaced, random offset (paper)", "haar": "independent Haar (pyg_lie Lift)"}


def plot(curves: Dict[str, Dict[str, list]], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.4, 3.8))
    for c, (kind, curve) in enumerate(curves.items()):
        K = curve["lifts"]
        q = list(zip(*curve["linf"]))
        ax.plot(K, q[1], marker="o", color=f"C{c}", label=f"{_LABEL[kind]}: median")
        ax.fill_between(K, q[0], q[2], color=f"C{c}", alpha=0.2)
        if kind == "haar":
            ax.plot(K, [q[1][0] * (k / K[0]) ** -0.5 for k in K], ls="--", color="gray",
                    label=r"$\propto K^{-1/2}$")
    if any(3 in curve["lifts"] for curve in curves.values()):
        ax.plot([3], [PAPER_K3], "k*", ms=10, label="paper, K = 3 (about 1e-6)")
    save_lift_plot(fig, ax, path, r"invariance error ($\ell^\infty$, logits)", title)


def results_table(curves: Dict[str, Dict[str, list]]) -> str:
    kinds = list(curves)
    head = "| K | " + " | ".join(f"{k}: l_inf median [q25, q75] | {k}: relative median" for k in kinds) + " |"
    lines = [head, "|---|" + "---|---|" * len(kinds)]
    for i, K in enumerate(next(iter(curves.values()))["lifts"]):
        cells = []
        for k in kinds:
            a, r = curves[k]["linf"][i], curves[k]["rel"][i]
            cells += [f"{a[1]:.3g} [{a[0]:.3g}, {a[2]:.3g}]", f"{r[1]:.3g}"]
        lines.append(f"| {K} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(args) -> Optional[int]:
    torch.set_num_threads(max(1, args.threads))
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    curves = {}
    for kind in dict.fromkeys(args.lift):
        curve = lift_invariance_curve(args.lifts, args.seeds, args.clouds, args.elements, args.data, args.hidden,
                                      args.layers, args.heads, args.kernel_dim, args.normalization,
                                      args.max_edges, progress=not args.no_progress, lift=kind,
                                      translation_scale=args.translation_scale)
        curve["monotone"] = is_monotone(curve)
        curves[kind] = curve
    seconds = time.time() - t0
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"curves": curves, "seconds": seconds,
                   "args": {k: v for k, v in vars(args).items() if not k.startswith("_")}}, f, indent=1)
    arch = f"d_v {args.hidden}, {args.layers} block(s), {args.heads} heads, kernel {args.kernel_dim}"
    table = results_table(curves)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"LieTransformer-SE2 at initialisation ({arch}; float64), {args.seeds} models x "
                f"{args.clouds} clouds x {args.elements} rotations\n\n{table}\n")
    path = os.path.join(args.out, "invariance_vs_lifts.png")
    plot(curves, path, f"LieTransformer-SE2 at initialisation ({arch})\n"
                       f"{args.seeds} models x {args.clouds} clouds x {args.elements} rotations, float64")
    print(table)
    for kind, curve in curves.items():
        print(f"{kind}: median error falls monotonically with K: {'yes' if curve['monotone'] else 'NO'}")
    print(f"wrote {args.out}/results.md, results.json, invariance_vs_lifts.png ({seconds:.0f} s)")
    _record(args, curves, path, seconds)
    return 0


#: the paper's Figure 3 (left): "already with 3 lift samples, the error is small (about 1e-6)", the
#: median absolute l-infinity logit error of the official diagnostic, with its equally spaced lift
PAPER_K3 = 1e-6


def _record(args, curves: Dict[str, Dict[str, list]], plot_path: str, seconds: float) -> None:
    """``results/lift-invariance/<run>.json``: median (and quartile) errors per lift kind and K."""
    from .results import record_run, setting_text
    metrics: Dict[str, float] = {}
    for kind, curve in curves.items():
        for K, a, r in zip(curve["lifts"], curve["linf"], curve["rel"]):
            metrics.update({f"{kind}.K{K}.linf_median": a[1], f"{kind}.K{K}.rel_median": r[1]})
        metrics[f"{kind}.monotone"] = float(curve["monotone"])
    paper = {"grid.K3.linf_median": PAPER_K3} if "grid" in curves and 3 in args.lifts else {}
    notes = [f"{args.seeds} models x {args.clouds} clouds x {args.elements} rotations at initialisation, "
             f"float64, absolute l-infinity logit error (the official diagnostic: 2 models x 1 cloud x 20 "
             f"rotations per K)"]
    setting = setting_text(vars(args), {"hidden": DIAGNOSTIC_ARCH["hidden"], "layers": DIAGNOSTIC_ARCH["layers"],
                                        "heads": DIAGNOSTIC_ARCH["heads"],
                                        "kernel_dim": DIAGNOSTIC_ARCH["kernel_dim"], "data": "official",
                                        "translation_scale": 0.0}, notes)
    name = f"init-d{args.hidden}-l{args.layers}-{args.normalization}"
    record_run(args, "lift-invariance", name, ["invariance"], metrics=metrics, paper=paper, setting=setting,
               wall_time_s=seconds, seed=list(range(args.seeds)), plots=[plot_path],
               extra={"quartiles": {kind: {"lifts": c["lifts"], "linf": c["linf"], "rel": c["rel"]}
                                    for kind, c in curves.items()}})


def run_demo(out_dir: str) -> None:
    """A few-second version for ``pyg-lie demo``: K = 1 .. 16, 6 models x 3 clouds x 6 rotations."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    main(p.parse_args(["--lifts", "1", "2", "4", "8", "16", "--seeds", "6", "--clouds", "3", "--elements", "6",
                       "--threads", str(torch.get_num_threads()), "--no-progress", "--out", out_dir,
                       "--results-dir", os.path.join(out_dir, "results")]))
