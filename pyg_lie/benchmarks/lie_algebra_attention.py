r"""``pyg-lie bench lie-algebra-attention``: forward+backward time vs number of tokens.

For each group and token count ``N`` (one long sequence, a random walk
``g_k = g_{k-1} exp(eps_k)`` so nearby relative poses stay in the chart) it times,
in the same run, one training step (forward + backward, median of ``--repeat``)
of

* ``G complete``: :class:`~pyg_lie.models.LieAlgebraTransformer` on all ``N^2`` pairs,
* ``G knn``: the same on the log-norm ``k``-nearest-neighbour graph (``N (k+1)`` edges),
* ``A complete`` / ``A knn``: :class:`~pyg_lie.models.VectorTokenTransformer` on the same graphs,

and reports the kNN graph construction time separately (not part of the step).
Results: a table on stdout, ``<out>/bench.json`` and ``<out>/bench.png`` (time vs
N, log-log).

Graph construction (second table, ``graph_rows`` in ``bench.json``): for each of
``--graph-groups`` and ``--graph-sizes`` (one random-walk sequence) the time of
:func:`~pyg_lie.models.log_knn_graph` with ``method="brute"`` (all ``N^2``
log-norms) and ``method="embedding"`` (k-d tree on the log-norm embedding, exact
logs on candidates), side by side with the ratio and a check that both edge sets
agree. Above ``--max-brute`` tokens the brute force is not run; its time is
extrapolated quadratically from the largest measured size (marked ``est.``).
``--graph-only`` skips the training-step table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import torch

from ..cli.types import device_name, nonnegative_int, positive_int
from ..groups import GROUPS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--groups", nargs="+", choices=list(GROUPS), default=["SE2", "SO3", "Aff2"])
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--k", type=positive_int, default=16, help="neighbours of the sparse graph")
    parser.add_argument("--max-complete", type=positive_int, default=1024,
                        help="skip the complete graph above this many tokens")
    parser.add_argument("--hidden", type=positive_int, default=32)
    parser.add_argument("--layers", type=nonnegative_int, default=3)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--repeat", type=positive_int, default=3)
    parser.add_argument("--threads", type=nonnegative_int, default=1)
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--graph-groups", nargs="+", choices=list(GROUPS), default=["SE3", "SO3"])
    parser.add_argument("--graph-sizes", type=positive_int, nargs="+", default=[1000, 10000, 100000],
                        help="token counts of the graph-construction timing (empty: skip)")
    parser.add_argument("--max-brute", type=positive_int, default=10000,
                        help="largest N for the brute-force graph build (above: extrapolated)")
    parser.add_argument("--graph-only", action="store_true", help="only time graph construction")
    parser.add_argument("--out", default=os.path.join("runs", "bench_lie_algebra_attention"))


def random_walk(group, n: int, step: float = 0.05, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """``(n, m, m)`` tokens ``g_k = g_{k-1} exp(eps_k)``, ``eps_k ~ N(0, step^2 I)``."""
    gen = torch.Generator().manual_seed(seed)
    eps = step * torch.randn(n, group.dim, generator=gen, dtype=torch.float64)
    steps = group.exp(eps)
    g = [group.random(generator=gen, dtype=torch.float64)]
    for k in range(1, n):
        g.append(group.compose(g[-1], steps[k]))
    return torch.stack(g).to(dtype)


def _time_step(model, g, edge_index, repeat: int, device) -> float:
    times = []
    for r in range(repeat + 1):  # first call warms up
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = model(g, edge_index)
        loss = out.prediction.square().sum() + out.g.square().sum()
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if r:
            times.append(time.perf_counter() - t)
        model.zero_grad(set_to_none=True)
    return statistics.median(times)


def main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..groups import get_group
    from ..models.lie_algebra_transformer import (LieAlgebraTransformer, VectorTokenTransformer,
                                                  complete_graph, log_knn_graph)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    jobs = [] if args.graph_only else [(gn, n) for gn in args.groups for n in args.sizes]
    for gn, n in tqdm(jobs, desc="bench"):
        G = get_group(gn)
        g = random_walk(G, n).to(dev, dtype)
        torch.manual_seed(0)
        kw = dict(hidden_channels=args.hidden, num_layers=args.layers, heads=args.heads)
        models = {"G": LieAlgebraTransformer(G, **kw).to(dev, dtype),
                  "A": VectorTokenTransformer(G, **kw).to(dev, dtype)}
        batch = torch.zeros(n, dtype=torch.long, device=dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # masked out-of-chart pairs (Aff)
            t = time.perf_counter()
            knn = log_knn_graph(G, g, args.k, batch)
            t_graph = time.perf_counter() - t
            graphs = {"knn": knn}
            if n <= args.max_complete:
                graphs["complete"] = complete_graph(batch)
            for gname, ei in graphs.items():
                for mname, model in models.items():
                    sec = _time_step(model, g, ei, args.repeat, dev)
                    rows.append({"group": gn, "N": n, "graph": gname, "model": mname, "edges": ei.shape[1],
                                 "step_s": sec, "knn_build_s": t_graph if gname == "knn" else 0.0})
    graph_rows = time_graph_construction(args, dev, dtype)
    if rows:
        print(f"{'group':6} {'N':>6} {'graph':9} {'model':5} {'edges':>9} {'fwd+bwd [ms]':>13} {'kNN build [ms]':>15}")
    for r in rows:
        print(f"{r['group']:6} {r['N']:>6} {r['graph']:9} {r['model']:5} {r['edges']:>9} "
              f"{1e3 * r['step_s']:>13.1f} {1e3 * r['knn_build_s']:>15.1f}")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"rows": rows, "graph_rows": graph_rows,
                   "args": {k: v for k, v in vars(args).items() if not k.startswith("_")}}, f)
    if rows:
        _plot(rows, os.path.join(args.out, "bench.png"))
    print(f"wrote {args.out}/bench.json" + (" and bench.png" if rows else ""))
    return 0


def _time_build(G, g, k: int, method: str, device) -> tuple[float, torch.Tensor]:
    """Seconds and edge index of one ``log_knn_graph(G, g, k, method=method)``."""
    from ..models.lie_algebra_transformer import log_knn_graph

    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    ei = log_knn_graph(G, g, k, method=method)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, ei


def time_graph_construction(args: argparse.Namespace, device, dtype) -> list[dict]:
    """Brute vs embedding kNN graph construction; prints a table, returns its rows."""
    from ..groups import get_group

    rows: list[dict] = []
    for gn in args.graph_groups:
        G = get_group(gn)
        last = None  # (N, seconds) of the largest brute-force run
        warm = random_walk(G, 64).to(device, dtype)
        for method in ("embedding", "brute"):  # imports, first-call allocations
            _time_build(G, warm, args.k, method, device)
        for n in args.graph_sizes:
            g = random_walk(G, n).to(device, dtype)
            t_emb, ei_emb = _time_build(G, g, args.k, "embedding", device)
            if n <= args.max_brute:
                t_brute, ei_brute = _time_build(G, g, args.k, "brute", device)
                key = lambda e: (e[1] * n + e[0]).sort().values  # noqa: E731
                same = bool(torch.equal(key(ei_emb), key(ei_brute)))
                last, est = (n, t_brute), False
            else:
                t_brute = None if last is None else last[1] * (n / last[0]) ** 2
                same, est = None, True
            rows.append({"group": gn, "N": n, "k": args.k, "edges": int(ei_emb.shape[1]),
                         "brute_s": t_brute, "brute_estimated": est, "embedding_s": t_emb,
                         "same_edges": same})
    if rows:
        print(f"kNN graph construction (k = {args.k}, one sequence, {args.dtype}, {device.type})")
        print(f"{'group':6} {'N':>7} {'brute [s]':>14} {'embedding [s]':>14} {'ratio':>9} {'same':>5}")
        for r in rows:
            b = "-" if r["brute_s"] is None else f"{r['brute_s']:.3f}" + (" est." if r["brute_estimated"] else "")
            ratio = "-" if r["brute_s"] is None else f"{r['brute_s'] / r['embedding_s']:.0f}x"
            same = "-" if r["same_edges"] is None else ("yes" if r["same_edges"] else "NO")
            print(f"{r['group']:6} {r['N']:>7} {b:>14} {r['embedding_s']:>14.3f} {ratio:>9} {same:>5}")
    return rows


def _plot(rows, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = sorted({r["group"] for r in rows})
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.5), squeeze=False)
    for ax, gn in zip(axes[0], groups):
        for (model, graph), style in {("G", "complete"): "C0-", ("G", "knn"): "C0--",
                                      ("A", "complete"): "C3-", ("A", "knn"): "C3--"}.items():
            pts = sorted((r["N"], r["step_s"]) for r in rows
                         if r["group"] == gn and r["model"] == model and r["graph"] == graph)
            if pts:
                ax.plot(*zip(*pts), style, marker="o", label=f"{model} {graph}")
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlabel("tokens N"); ax.set_ylabel("forward+backward [s]"); ax.set_title(gn)
        ax.legend(fontsize=7)
    fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)
