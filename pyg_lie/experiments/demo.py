"""``pyg-lie demo`` (``make demo``): the library's main job in a few minutes.

1. The group library: exp/log round trips and the left-invariance of relative
   poses that every equivariant layer relies on.
2. Neighbourhood search: a batched radius graph, with each backend's time.
3. If the LieTransformer is available: a short constellation-counting run
   (train, test on D, T2- and SE2-transformed test sets, invariance error).
4. The Haar-lift invariance error of freshly initialised models against the
   number of lift samples (the paper's Figure 3, left).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import time

import torch

from pyg_lie.groups import GROUPS, get_group


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/demo", help="folder for plots and checkpoints")
    parser.add_argument("--skip-training", action="store_true", help="only show groups and neighbourhoods")


def _groups_section() -> None:
    print("== 1. Lie groups: log(exp(xi)) = xi and log((a g)^-1 (a h)) = log(g^-1 h) ==")
    print(f"{'group':>6} {'dim':>4} {'blocks':<40} {'round trip':>11} {'left-inv.':>10}")
    gen = torch.Generator().manual_seed(0)
    for name in GROUPS:
        G = get_group(name)
        xi = 0.5 * torch.randn(256, G.dim, generator=gen, dtype=torch.float64)
        rt = (G.log(G.exp(xi)) - xi).abs().max().item()
        g, h = G.exp(xi[:128]), G.exp(xi[128:])
        a = G.exp(0.5 * torch.randn(128, G.dim, generator=gen, dtype=torch.float64))
        inv = (G.log(G.between(a @ g, a @ h)) - G.log(G.between(g, h))).abs().max().item()
        blocks = ", ".join(f"{k}[{v.stop - v.start}]" for k, v in G.blocks.items())
        print(f"{name:>6} {G.dim:>4} {blocks:<40} {rt:>11.1e} {inv:>10.1e}")
    print("   (float64; errors at 1e-15..1e-13 mean exact up to rounding)\n")


def _neighbors_section() -> None:
    if importlib.util.find_spec("pyg_lie.neighbors") is None:
        return
    from pyg_lie.neighbors import radius_graph

    print("== 2. Radius graphs on 4 clouds of 5,000 points in the unit cube, r = 0.08 ==")
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(20_000, 3, generator=gen)
    batch = torch.arange(4).repeat_interleave(5_000)
    results = {}
    for backend in ("kdtree", "torch_cluster", "cdist", "auto"):
        try:
            radius_graph(pos[:100], 0.08, batch=batch[:100], backend=backend)  # warm-up
            t0 = time.perf_counter()
            ei = radius_graph(pos, 0.08, batch=batch, backend=backend)
            results[backend] = (time.perf_counter() - t0, ei)
        except (ValueError, ImportError) as err:  # backend not installed here
            print(f"   {backend:<14} unavailable: {err}")
    ref = None
    for backend, (dt, ei) in results.items():
        same = "" if ref is None else ("  same edges" if torch.equal(ei, ref) else "  DIFFERENT EDGES")
        ref = ei if ref is None else ref
        print(f"   {backend:<14} {dt * 1e3:8.1f} ms  {ei.shape[1]:>8} edges"
              f"  ({ei.shape[1] / pos.shape[0]:.1f} neighbours per point){same}")
    print()


def main(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    _groups_section()
    _neighbors_section()
    if args.skip_training:
        return 0
    if importlib.util.find_spec("pyg_lie.experiments.constellation") is not None:
        from pyg_lie.experiments import constellation

        if hasattr(constellation, "run_demo"):
            print("== 3. LieTransformer on constellation counting (short run) ==")
            constellation.run_demo(args.out)
    if importlib.util.find_spec("pyg_lie.experiments.lift_invariance") is not None:
        from pyg_lie.experiments import lift_invariance

        print("\n== 4. Invariance error vs Haar lift samples at initialisation (paper Fig. 3 left) ==")
        lift_invariance.run_demo(os.path.join(args.out, "invariance_at_init"))
    return 0
