"""``pyg-lie bench neighbors``: the radius-graph backends side by side.

For each total size ``N`` the points are split into ``--graphs`` graphs of
uniform points in a cube of unit density (side ``(N / graphs)^(1/d)``), and the
radius is the one whose ball holds ``--degree`` points on average, so the edge
count grows linearly with ``N``. Every backend runs ``--repeat`` times; the
table shows the median and minimum wall time, the median process CPU time
(less sensitive to other jobs on a shared machine when ``--threads 1``), the
number of edges, and the ratio of median wall times to the fastest backend.
Backends run round robin; their edge sets are checked to be identical.
``cdist`` is skipped when its extrapolated time exceeds ``--max-seconds``.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Dict, List

import torch

from pyg_lie import neighbors as nb

from ..cli.types import device_name, nonnegative_int, positive_float, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[1000, 10000, 100000],
                        help="total number of points N (all graphs together)")
    parser.add_argument("--graphs", type=positive_int, default=4, help="graphs per batch")
    parser.add_argument("--repeat", type=positive_int, default=3, help="timed runs per backend (median)")
    parser.add_argument("--degree", type=positive_float, default=16.0, help="mean neighbours per point")
    parser.add_argument("--dim", type=positive_int, default=3, help="space dimension d")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--backends", nargs="+", default=None,
                        help="backends to run (default: auto, then every backend available on the device)")
    parser.add_argument("--max-seconds", type=positive_float, default=60.0,
                        help="skip cdist when one run is extrapolated to take longer")
    parser.add_argument("--kdtree-methods", action="store_true",
                        help="also time the raw scipy cKDTree query methods (CPU)")
    parser.add_argument("--threads", type=nonnegative_int, default=None,
                        help="torch intra-op threads (default: torch's default)")
    parser.add_argument("--seed", type=nonnegative_int, default=0)


def ball_radius(degree: float, d: int) -> float:
    """Radius of the d-ball of volume ``degree`` (unit density -> ``degree`` points inside)."""
    unit_ball = math.pi ** (d / 2) / math.gamma(d / 2 + 1)
    return (degree / unit_ball) ** (1.0 / d)


def make_cloud(n: int, graphs: int, d: int, dtype: torch.dtype, device: str, seed: int):
    """Points ``(n, d)`` and sorted ``batch (n,)``: ``graphs`` cubes of unit density."""
    gen = torch.Generator().manual_seed(seed)
    per = max(1, n // graphs)
    side = per ** (1.0 / d)
    pos = torch.rand(n, d, generator=gen, dtype=torch.float64) * side
    batch = torch.clamp(torch.arange(n) // per, max=graphs - 1)
    return pos.to(dtype).to(device), batch.to(device)


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_once(pos, batch, r, backend, device):
    """One call: (wall seconds, process CPU seconds, edge_index)."""
    _sync(device)
    t, c = time.perf_counter(), time.process_time()
    e = nb.radius_graph(pos, r, batch, backend=backend)
    _sync(device)
    return time.perf_counter() - t, time.process_time() - c, e


def cdist_estimate(pos, batch, r, device) -> float:
    """Seconds for a full cdist run, extrapolated from one graph of at most 2000 points."""
    counts = torch.bincount(batch).tolist()
    m = min(2000, max(counts))
    sub = pos[:m]
    nb.radius_graph(sub, r, backend="cdist")  # warm
    _sync(device)
    t = time.perf_counter()
    nb.radius_graph(sub, r, backend="cdist")
    _sync(device)
    per_pair = (time.perf_counter() - t) / (m * m)
    return per_pair * sum(c * c for c in counts)


def kdtree_methods(pos, batch, r) -> Dict[str, float]:
    """Raw scipy timings of the query methods (one graph: the first)."""
    from scipy.spatial import cKDTree
    import numpy as np

    p = pos[batch == 0].double().numpy()
    out = {}
    t = time.perf_counter()
    tree = cKDTree(p)
    out["build"] = time.perf_counter() - t
    t = time.perf_counter()
    tree.query_pairs(r, output_type="ndarray")
    out["query_pairs"] = time.perf_counter() - t
    t = time.perf_counter()
    tree.sparse_distance_matrix(tree, r, output_type="ndarray")
    out["sparse_distance_matrix"] = time.perf_counter() - t
    t = time.perf_counter()
    lists = tree.query_ball_point(p, r)
    np.concatenate([np.asarray(a, dtype=np.int64) for a in lists])
    out["query_ball_point"] = time.perf_counter() - t
    return out


def main(args: argparse.Namespace) -> int:
    dtype = getattr(torch, args.dtype)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    avail = nb.available_backends(args.device)
    # "auto" first: on CPU it runs the native cell lists (pyg_lie.neighbors, _native/radius_graph.c)
    backends: List[str] = args.backends or ["auto", *avail]
    for b in backends:
        nb.resolve_backend(b, args.device)  # raises with the fix if unusable
    r = ball_radius(args.degree, args.dim)
    print(f"radius_graph, {args.graphs} graphs, d={args.dim}, {args.dtype}, device={args.device}, "
          f"r={r:.4f} (~{args.degree:g} neighbours/point), median of {args.repeat}, "
          f"torch threads={torch.get_num_threads()}")
    # warm-up: lazy imports and first-call overheads
    wpos, wbatch = make_cloud(200, args.graphs, args.dim, dtype, args.device, args.seed)
    for b in backends:
        nb.radius_graph(wpos, r, wbatch, backend=b)

    header = (f"{'N':>8}  {'backend':<14} {'median':>11} {'min':>11} {'CPU median':>11} "
              f"{'edges':>10} {'vs fastest':>10}")
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        pos, batch = make_cloud(n, args.graphs, args.dim, dtype, args.device, args.seed)
        run = []
        skipped = []
        for b in backends:
            if b == "cdist" and cdist_estimate(pos, batch, r, args.device) > args.max_seconds:
                skipped.append(b)
            else:
                run.append(b)
        wall: Dict[str, List[float]] = {b: [] for b in run}
        cpu: Dict[str, List[float]] = {b: [] for b in run}
        edges: Dict[str, int] = {}
        ref = None
        for _ in range(args.repeat):  # round robin, so load changes hit every backend alike
            for b in run:
                w, c, e = time_once(pos, batch, r, b, args.device)
                wall[b].append(w)
                cpu[b].append(c)
                if ref is None:
                    ref = e
                elif not torch.equal(ref, e):
                    raise RuntimeError(f"backend {b} disagrees with {run[0]} at N={n}")
                edges[b] = e.size(1)
        med = {b: statistics.median(wall[b]) for b in run}
        best = min(med.values()) if med else float("nan")
        for b in backends:
            if b in skipped:
                print(f"{n:>8}  {b:<14} {'skipped (too slow)':>35}")
                continue
            print(f"{n:>8}  {b:<14} {med[b] * 1e3:>8.1f} ms {min(wall[b]) * 1e3:>8.1f} ms "
                  f"{statistics.median(cpu[b]) * 1e3:>8.1f} ms {edges[b]:>10} {med[b] / best:>9.2f}x")
        if args.kdtree_methods and torch.device(args.device).type == "cpu":
            m = kdtree_methods(pos, batch, r)
            print("          scipy on one graph: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in m.items()))
    print(f"auto picks: {nb.resolve_backend('auto', args.device)!r} on {args.device} "
          f"(rule: CPU -> kdtree, else torch_cluster, else cdist; CUDA -> torch_cluster, else cdist); "
          f"before them, on CPU, radius_graph of 1-3 dimensions with sorted batches and no truncation "
          f"runs the native cell lists")
    return 0
