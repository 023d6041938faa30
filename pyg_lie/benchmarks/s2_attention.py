"""``pyg-lie bench s2-attention``: our S^2 neighbourhood attention vs torch-harmonics.

For every grid size the same weights are loaded into

* ``torch-harmonics``: ``torch_harmonics.NeighborhoodAttentionS2`` with its compiled
  CPU kernel (``optimized_kernel=True``),
* ``pyg-lie fused``: :class:`pyg_lie.nn.S2NeighborhoodAttention` on the library's
  CSR attention engine (the fused scores, softmax and aggregation kernel that
  LieSelfAttention uses, log quadrature weights as location scores),
* ``pyg-lie edge-list``: the same layer on the generic message-passing path
  (``optimized_kernel=False``, per-edge gathers and PyG's scatter softmax),

the outputs are checked against each other, and forward and forward+backward
wall times and process CPU times are measured in one process, interleaving the
implementations within every repetition so that load from other processes hits
all of them alike. The table reports the minimum and the median over repetitions
and the ratios to torch-harmonics of both (< 1 means faster than torch-harmonics).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import time
import warnings
from typing import Dict, List, Tuple

import torch

from ..cli.types import nonnegative_int, positive_int


def grid_list(text: str) -> List[Tuple[int, int]]:
    """``--sizes``: comma-separated ``NLATxNLON`` grids, both sides at least 2."""
    try:
        out = [tuple(int(v) for v in item.lower().split("x")) for item in text.split(",")]
    except ValueError:
        out = []
    if not out or not all(len(g) == 2 and min(g) >= 2 for g in out):
        raise argparse.ArgumentTypeError(f"must be comma-separated NLATxNLON grids with both sides >= 2, "
                                         f"such as 32x64,64x128, got {text!r}")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", type=grid_list, default=[(32, 64), (64, 128)],
                        help="comma separated NLATxNLON grids, e.g. 32x64,64x128")
    parser.add_argument("--grid", default="equiangular",
                        choices=["equiangular", "legendre-gauss", "lobatto", "equiangular-trapezoidal"])
    parser.add_argument("--channels", type=positive_int, default=32)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--batch", type=positive_int, default=4)
    parser.add_argument("--repeat", type=positive_int, default=5, help="timed repetitions (after one warm-up)")
    parser.add_argument("--threads", type=nonnegative_int, default=0, help="torch intra-op threads (0: leave default)")
    parser.add_argument("--skip-edge-list", action="store_true", help="do not time the message-passing path")
    parser.add_argument("--out", default="runs/bench_s2_attention", help="folder for results.csv/json")
    parser.add_argument("--seed", type=nonnegative_int, default=0)


def _time(fn):
    """Wall-clock and process CPU time (all threads) of ``fn()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    warnings.simplefilter("ignore", UserWarning)
    from torch_harmonics import NeighborhoodAttentionS2

    from pyg_lie.nn import S2NeighborhoodAttention

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    sizes = args.sizes
    rows: List[Dict[str, object]] = []
    print(f"S^2 neighbourhood attention, grid={args.grid}, C={args.channels}, heads={args.heads}, "
          f"batch={args.batch}, threads={torch.get_num_threads()}, repeat={args.repeat} (min and median over repeats)")
    for shape in sizes:
        kw = dict(grid_in=args.grid, grid_out=args.grid, num_heads=args.heads)
        ref = NeighborhoodAttentionS2(args.channels, shape, shape, **kw)
        t0 = time.perf_counter()
        ours = S2NeighborhoodAttention(args.channels, shape, shape, **kw)
        build = time.perf_counter() - t0
        ours.load_state_dict(ref.state_dict())
        impls = {"torch-harmonics": ref, "pyg-lie fused": ours}
        if not args.skip_edge_list:
            edge = S2NeighborhoodAttention(args.channels, shape, shape, optimized_kernel=False, **kw)
            edge.load_state_dict(ref.state_dict())
            impls["pyg-lie edge-list"] = edge
        x = torch.randn(args.batch, args.channels, *shape)
        with torch.no_grad():
            y_ref = ref(x)
            err = {n: float((m(x) - y_ref).abs().max()) for n, m in impls.items()}
        times = {n: ([], []) for n in impls}
        cpu = {n: ([], []) for n in impls}
        for rep in tqdm(range(args.repeat + 1), desc=f"{shape[0]}x{shape[1]}", leave=False):
            for name, mod in impls.items():
                xi = x.clone().requires_grad_(True)
                out = {}
                (t_f, c_f) = _time(lambda: out.setdefault("y", mod(xi)))
                (t_b, c_b) = _time(lambda: out["y"].sum().backward())
                mod.zero_grad(set_to_none=True)
                if rep > 0:  # the first round is a warm-up
                    times[name][0].append(t_f)
                    times[name][1].append(t_f + t_b)
                    cpu[name][0].append(c_f)
                    cpu[name][1].append(c_f + c_b)
        base_f = min(times["torch-harmonics"][0])
        base_fb = min(times["torch-harmonics"][1])
        med_f = statistics.median(times["torch-harmonics"][0])
        med_fb = statistics.median(times["torch-harmonics"][1])
        cbase_f, cbase_fb = min(cpu["torch-harmonics"][0]), min(cpu["torch-harmonics"][1])
        for name in impls:
            f, fb = times[name]
            cf, cfb = cpu[name]
            rows.append(dict(grid=f"{shape[0]}x{shape[1]}", impl=name, fwd_ms=1e3 * min(f),
                             fwd_median_ms=1e3 * statistics.median(f), fwd_bwd_ms=1e3 * min(fb),
                             fwd_bwd_median_ms=1e3 * statistics.median(fb), fwd_ratio=min(f) / base_f,
                             fwd_bwd_ratio=min(fb) / base_fb, fwd_median_ratio=statistics.median(f) / med_f,
                             fwd_bwd_median_ratio=statistics.median(fb) / med_fb, cpu_fwd_ms=1e3 * min(cf),
                             cpu_fwd_bwd_ms=1e3 * min(cfb), cpu_fwd_ratio=min(cf) / cbase_f,
                             cpu_fwd_bwd_ratio=min(cfb) / cbase_fb, max_abs_diff=err[name],
                             graph_build_s=build if name != "torch-harmonics" else float("nan")))
    head = f"{'grid':>7} {'implementation':<18} {'fwd ms':>9} {'(median)':>9} {'fwd+bwd ms':>11} {'(median)':>9} " \
           f"{'fwd x':>6} {'f+b x':>6} {'(median)':>8} {'max|diff|':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['grid']:>7} {r['impl']:<18} {r['fwd_ms']:9.1f} {r['fwd_median_ms']:9.1f} {r['fwd_bwd_ms']:11.1f} "
              f"{r['fwd_bwd_median_ms']:9.1f} {r['fwd_ratio']:6.2f} {r['fwd_bwd_ratio']:6.2f} "
              f"{r['fwd_bwd_median_ratio']:8.2f} {r['max_abs_diff']:9.1e}")
    print("\nprocess CPU time (all threads; less sensitive to other processes than wall time)")
    head2 = f"{'grid':>7} {'implementation':<18} {'cpu fwd ms':>11} {'cpu f+b ms':>11} {'fwd x':>6} {'f+b x':>6}"
    print(head2)
    print("-" * len(head2))
    for r in rows:
        print(f"{r['grid']:>7} {r['impl']:<18} {r['cpu_fwd_ms']:11.1f} {r['cpu_fwd_bwd_ms']:11.1f} "
              f"{r['cpu_fwd_ratio']:6.2f} {r['cpu_fwd_bwd_ratio']:6.2f}")
    print("ratios are ours / torch-harmonics on the minimum (f+b also on the median) over repetitions (< 1: "
          "faster); timings are noisy on a shared machine")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        with open(os.path.join(args.out, "results.json"), "w") as fh:
            json.dump(dict(config=vars(args) | {"threads": torch.get_num_threads()}, rows=rows), fh, indent=1,
                      default=str)
        print(f"wrote {os.path.join(args.out, 'results.csv')}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(p)
    raise SystemExit(main(p.parse_args()))
