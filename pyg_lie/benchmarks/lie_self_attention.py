"""``pyg-lie bench lie-self-attention``: sparse LieSelfAttention vs dense vs TransformerConv.

Prints, in one run, forward+backward wall time (median of ``--repeats`` after
one warm-up) and peak memory of

* **sparse**: :class:`~pyg_lie.nn.LieSelfAttention` on the lifted radius graph
  (edge list, memory ``O(E (heads + d))``);
* **dense**: the same layer with the same parameters computed over all
  ``(N K)^2`` pairs with a neighbourhood mask (how the official LieTransformer
  computes it; :func:`dense_lie_self_attention`, checked equal to the sparse
  layer in the tests);
* **TransformerConv**: PyG's non-equivariant ``TransformerConv`` on the same
  lifted graph (edge features = the relative log), as a reference;

against ``N`` (points per cloud) and the number of lift samples ``K``, and the
full model (lift + edges + blocks + pooling) on the configurations the official
implementation was timed on (``OFFICIAL``), built
with the official blocks' widths (``OFFICIAL_ARCH``: location MLP 16-16 per head, pointwise
MLP ``d -> d -> d``) so that both sides do the same per-node work; with ``--compile``
also with every block under ``torch.compile`` (compilation timed apart). Beside each
configuration, two bounds on the speed-up any implementation can reach on the machine: the
per-node work timed alone (``pointwise``), and the blocks' matrix products
(:func:`matmul_gflop`) at the best fp32 matrix-product rate measured in the same run
(:func:`peak_gemm_gflops`). ``--amp`` adds the model under bfloat16 autocast,
``--shared-kernel`` the library's default shared location MLP, ``--torch-kernels`` the
model on torch's kernels instead of the native C kernels (location MLP, CSR products),
``--dense-model`` the same model computed densely as the official code does (all-pairs
configurations), so that a speed-up is also measured against that algorithm on the same host,
and ``--official-src DIR`` the official implementation itself, imported from a local checkout
(:mod:`.official_lie_transformer`), on the same clouds.

Every configuration is run twice, in separate subprocesses: once for time with
the default allocator (what users get), once for memory. The official configurations run
one subprocess per configuration and implementation, the implementations of a
configuration back to back, so that a drifting host speed affects both sides of a ratio
alike. Peak memory: each
implementation runs in its own subprocess (started with
``MALLOC_MMAP_THRESHOLD_=65536`` so that freed tensors go back to the OS; this
turns every tensor above 64 KiB into an ``mmap`` and distorts time, hence the
separate timing run);
before every configuration the kernel's peak-RSS mark is reset
(``echo 5 > /proc/self/clear_refs``) and reported is ``VmHWM`` minus the RSS
right before the timed calls (inputs and parameters already allocated), i.e.
the extra memory of forward+backward. Where the reset is not permitted, every
configuration gets a fresh subprocess and ``ru_maxrss`` instead. Timings on a shared machine are noisy:
run the comparisons back to back and repeat them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

import torch
from torch import Tensor

from ..cli.types import positive_float, positive_int
from ..testing import dense_adjacency as _dense_adjacency  # noqa: F401  (re-exported)
from ..testing import dense_lie_self_attention, dense_model_forward  # noqa: F401  (re-exported)

__all__ = ["add_arguments", "main", "dense_lie_self_attention", "run_config"]

#: the official blocks' widths: one location MLP 16-16 (3 linears) per head, as the official
#: ``MultiheadWeightNet``, and the pointwise ``MLP(dim, dim, dim)`` of
#: ``EquivariantTransformerBlock`` (dot-product content and softmax are the model's defaults)
OFFICIAL_ARCH = dict(kernel_dim=16, kernel_layers=3, kernel_per_head=True, mlp_ratio=1.0)

#: the implementations of the one-layer sweep (the rest time the full model)
SWEEP_IMPLS = ("sparse", "dense", "transformerconv")

#: the full model run otherwise (``--compile``, ``--shared-kernel``, ``--torch-kernels``, ``--amp``):
#: table heading and explanation
MODEL_VARIANTS = {
    "model-compiled": ("compiled", "the same model with every block under torch.compile (inductor), after "
                                   "compilation; compiled / eager < 1 means compiling pays."),
    "model-shared": ("shared kernel", "the library's default location kernel: one MLP with an output per head "
                                      "instead of the official one MLP per head (about a quarter of the "
                                      "location-MLP work); another architecture, so not a like-for-like "
                                      "comparison with the official figures."),
    "model-torch": ("torch kernels", "the same model on torch's kernels (the chunked per-head location MLP, "
                                     "torch.sparse's CSR products) instead of the native C kernels "
                                     "(PYG_LIE_NATIVE=0), the library's fallback without a C compiler."),
    "model-dense": ("dense", "the same model computed as the official code does, with dense (clouds, M, M) "
                             "pair tensors in every block (`dense_lie_self_attention`: the location MLP on all "
                             "pairs, masked softmax), in this run; all-pairs configurations only (with "
                             "neighbourhoods the official code runs the location MLP on 32 pairs per node, "
                             "this formulation on all). dense / eager is the speed-up over it on this host."),
    "official-code": ("official code here", "the official implementation (github.com/oxcsml/lie-transformer "
                                            "with LieConv, from --official-src) on the same clouds, timed in "
                                            "this run: official code here / eager is the speed-up measured on "
                                            "this host (with neighbourhoods its mc_samples nearest lifted "
                                            "neighbours, as many as the model's radius graph holds on average)."),
    "model-bf16": ("bf16 autocast", "the same model under torch.autocast('cpu', torch.bfloat16) (the fused "
                                    "kernels stay in float32); not comparable with the official float32 figures."),
}

#: variants whose peak memory the table shows as well
VARIANTS_WITH_MEMORY = ("official-code",)
#: variants whose time the table divides by the at-peak time as well: the speed-up over them
#: that no implementation of the architecture can exceed on this host
VARIANTS_WITH_BOUND = ("official-code",)

#: the official implementation's times (low, high; seconds) and peak memory (GB) on a 2-core CPU,
#: for reference beside the same-run timings of --official-src
OFFICIAL = {
    "T2 32x32 d128 L4 all": (0.12, 0.19, 0.9),
    "SE2 K4 32x32 d128 L4 all": (4.2, 4.4, 4.4),
    "T2 N512 d64 L2 all": (1.2, 1.2, 1.6),
    "T2 N1024 d64 L2 all": (4.2, 4.5, 4.6),
    "T2 N2048 d64 L2 all": (24.0, 27.0, 15.6),
    "SE2 K4 N128 d64 L2 all": (1.0, 1.0, 1.6),
    "SE2 K4 N256 d64 L2 all": (3.5, 3.5, 4.8),
    "SE2 K4 N512 d64 L2 all": (31.0, 31.0, 15.8),
    "T2 N1024 d64 L2 nbhd32": (0.21, 0.21, 0.8),
    "T2 N2048 d64 L2 nbhd32": (1.07, 1.07, 1.3),
    "SE2 K4 N512 d64 L2 nbhd32": (1.39, 1.39, 1.4),
}


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _reset_peak() -> bool:
    """Reset this process's peak-RSS mark (Linux >= 4.0); False where not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cloud(n: int, num_clouds: int, degree: Optional[float], gen: torch.Generator):
    """``num_clouds`` clouds of ``n`` points (``degree=None``: randn, all pairs), or
    uniform in a square of area ``n pi / degree`` with the radius at which the mean
    in-degree, self loop included, is exactly ``degree`` (the ``(degree - 1) n``-th
    smallest distance between distinct points of a cloud), so that "32-neighbourhoods"
    hold 32 points on average as the official code's 32 nearest neighbours do."""
    if degree is None:
        pos = torch.randn(num_clouds * n, 2, generator=gen)
        return pos, None
    side = math.sqrt(n * math.pi / degree)
    pos = torch.rand(num_clouds * n, 2, generator=gen) * side
    pairs = []
    for c in range(num_clouds):
        p = pos[c * n:(c + 1) * n].double()
        d = torch.cdist(p, p)
        pairs.append(d[~torch.eye(n, dtype=torch.bool)])
    k = round((degree - 1) * n * num_clouds)
    radius = float(torch.cat(pairs).kthvalue(k).values) if k > 0 else 0.0
    return pos, radius


def matmul_gflop(model, num_nodes: int, num_edges: int) -> float:
    """GFLOP of the matrix products in one forward + backward of ``model``'s blocks on
    ``num_nodes`` lifted nodes and ``num_edges`` edges (dot-product content): the per-node
    linear maps (Q/K/V/output projections, block MLP), the location MLP's linear maps on every
    edge, the scores ``q_i . k_j`` and the weighted sums of ``v_j``. Each product counts once
    forward and once per gradient (weights, inputs), except the gradient of the location
    MLP's input, which nothing needs. Lift, embedding, pooling and head are left out, so this
    is a lower bound for any implementation of the architecture."""
    from torch.nn import Linear

    from ..nn._edge_mlp import HeadwiseMLP

    def linears(mods):
        return [m for m in mods if isinstance(m, Linear)]

    def macs(mlp):  # multiply-adds per row of each linear map
        if isinstance(mlp, HeadwiseMLP):
            return [w.numel() for w in mlp.weights]  # heads x out x in
        return [lin.in_features * lin.out_features for lin in linears(mlp)]

    flop = 0
    for blk in model.blocks:
        a = blk.attn
        for lin in [a.lin_q, a.lin_k, a.lin_v, a.lin_out, *linears(blk.mlp)]:
            flop += 3 * 2 * num_nodes * lin.in_features * lin.out_features
        for i, m in enumerate(macs(a.loc_mlp)):
            flop += (3 if i else 2) * 2 * num_edges * m
        flop += 2 * 3 * 2 * num_edges * a.heads * a.head_dim
    return flop / 1e9


def peak_gemm_gflops() -> float:
    """This CPU's best fp32 matrix-product rate (GFLOP/s) over square sizes 512-2048, at the
    current thread count."""
    best = 0.0
    for n in (512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        reps = max(1, int(4e9 / (2 * n ** 3)))
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t) / 1e9)
    return best


def run_config(cfg: Dict) -> Dict:
    """Run one configuration in this process; returns times (s) and memory (MB)."""
    torch.set_num_threads(cfg.get("threads", 1))
    from ..groups import get_group
    from ..nn.lie_self_attention import LieSelfAttention
    from ..nn.lift import Lift
    from ..nn.lifted_edges import lifted_edges

    gen = torch.Generator().manual_seed(0)
    G = get_group(cfg["group"])
    K, n, B, d, H = cfg["K"], cfg["N"], cfg.get("clouds", 1), cfg["dim"], cfg["heads"]
    pos, radius = _cloud(n, B, cfg.get("degree"), gen)
    batch = torch.arange(B).repeat_interleave(n)
    x = torch.ones(B * n, 1)
    out: Dict = {}
    t0 = time.perf_counter()
    if cfg["impl"] == "official-code":
        from .official_lie_transformer import official_step
        step, out["params"] = official_step(cfg, cfg["official_src"], pos, B)
        lifted = Lift(G, K).eval()(x, pos, batch)
        ei = lifted_edges(pos, batch, K, radius)
    elif cfg["impl"] in ("model", *MODEL_VARIANTS):
        from ..models.lie_transformer import LieTransformer
        from .. import ops
        if cfg["impl"] == "model-torch":  # this subprocess only
            os.environ["PYG_LIE_NATIVE"] = "0"
        out["native"] = ops.native_available()
        arch = dict(OFFICIAL_ARCH, kernel_per_head=cfg["impl"] != "model-shared")
        model = LieTransformer(G, 1, d, 1, num_layers=cfg["layers"], heads=H, lift_samples=K, radius=radius,
                               **arch)
        if cfg["impl"] == "model-compiled":  # blocks compiled one by one (the lift and graph stay eager)
            # fresh caches per configuration: otherwise the shapes of the previous configuration
            # make dynamo recompile with dynamic shapes, whose kernels are slower than the
            # static-shape ones, which no user with one model sees
            torch._dynamo.reset()
            for i, blk in enumerate(model.blocks):
                model.blocks[i] = torch.compile(blk, fullgraph=True)

        amp = cfg["impl"] == "model-bf16"
        lifted = model.lift(x, pos, batch)
        ei = lifted_edges(pos, batch, K, radius)
        if cfg["impl"] == "model-dense":
            adj = _dense_adjacency(ei, B, lifted.g.size(0) // B)

            def step():
                dense_model_forward(model, x, pos, batch, adj).sum().backward()
        else:
            def step():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                    y = model(x, pos, batch, num_graphs=B)
                y.float().sum().backward()
    elif cfg["impl"] == "pointwise":
        # the model's per-node work alone (LayerNorms, Q/K/V/output projections, pointwise
        # MLPs): a floor for any implementation of the architecture, dense or sparse
        from ..models.lie_transformer import LieTransformer
        model = LieTransformer(G, 1, d, 1, num_layers=cfg["layers"], heads=H, lift_samples=K, radius=radius,
                               **OFFICIAL_ARCH)
        lifted = model.lift(x, pos, batch)
        ei = lifted_edges(pos, batch, K, radius)
        h0 = torch.randn(lifted.g.size(0), d, generator=gen, requires_grad=True)
        out.update(gflop=matmul_gflop(model, lifted.g.size(0), ei.size(1)), peak_gflops=peak_gemm_gflops())

        def step():
            h = h0
            for blk in model.blocks:
                y, a = blk.norm1(h), blk.attn
                h = h + a.lin_out(a.lin_v(y) + a.lin_q(y) + a.lin_k(y))
                h = h + blk.mlp(blk.norm2(h))
            h.sum().backward()
    else:
        lifted = Lift(G, K).eval()(x, pos, batch)
        ei = lifted_edges(pos, batch, K, radius)
        out["edge_time"] = time.perf_counter() - t0
        M = lifted.g.size(0)
        h = torch.randn(M, d, generator=gen, requires_grad=True)
        layer = LieSelfAttention(d, d, G, H, kernel_dim=16, kernel_layers=3)
        if cfg["impl"] == "sparse":
            def step():
                layer(h, ei, lifted.g).sum().backward()
        elif cfg["impl"] == "dense":
            adj = _dense_adjacency(ei, B, M // B)
            hb, gb = h.view(B, M // B, d), lifted.g.view(B, M // B, *lifted.g.shape[1:])

            def step():
                dense_lie_self_attention(layer, hb, gb, adj).sum().backward()
        elif cfg["impl"] == "transformerconv":
            from torch_geometric.nn import TransformerConv
            conv = TransformerConv(d, d // H, heads=H, edge_dim=G.dim)
            ea = G.relative_log(lifted.g, ei, one_sided_cut=True)

            def step():
                conv(h, ei, ea).sum().backward()
        else:
            raise ValueError(cfg["impl"])
    out["num_edges"] = int(ei.size(1))
    out["num_nodes"] = int(lifted.g.size(0))
    if cfg["impl"] == "model-compiled":
        t = time.perf_counter()
        step()  # compilation, before the usual warm-up call
        out["compile_time"] = time.perf_counter() - t
    import gc
    gc.collect()
    out["peak_reset"] = _reset_peak()
    base = _rss_kb()
    times = []
    repeats = cfg.get("repeats", 3)
    r = 0
    while r <= repeats:
        t = time.perf_counter()
        step()
        dt = time.perf_counter() - t
        if r:
            times.append(dt)
        elif dt > 5.0:  # slow configuration: one timed call after the warm-up
            repeats = 1
        r += 1
    peak = _peak_kb()
    out.update(time=statistics.median(times), time_min=min(times), mem_mb=max(0, peak - base) / 1024,
               peak_rss_mb=peak / 1024)
    return out


_WORKER = """
import json, sys
from pyg_lie.benchmarks.lie_self_attention import run_config, _reset_peak
cfgs = json.loads(sys.argv[1])
if len(cfgs) > 1 and not _reset_peak():
    print("NORESET", flush=True)
    sys.exit(0)
for i, cfg in enumerate(cfgs):
    try:
        res = run_config(cfg)
    except Exception as err:  # report and continue (e.g. out of memory)
        res = {"error": type(err).__name__ + ": " + str(err)[:100]}
    print("RESULT" + json.dumps({"i": i, **res}), flush=True)
"""


def _run_subprocess(cfgs: List[Dict], timeout: float, bar=None, memory: bool = True) -> List[Dict]:
    """Run ``cfgs`` in one fresh subprocess (one per config where peaks cannot be reset);
    ``memory=True`` sets the allocator up for peak-RSS measurement (see the module doc)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536") if memory else dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", _WORKER, json.dumps(cfgs)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    out: List[Dict] = [{"error": "not run (earlier configuration timed out)"} for _ in cfgs]
    t0 = time.time()
    import select
    while True:
        left = timeout - (time.time() - t0)
        if left <= 0:
            proc.kill()
            break
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 5.0))
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("NORESET"):
                proc.wait()
                res = []
                for c in cfgs:
                    res += _run_subprocess([c], timeout, bar, memory)
                return res
            if line.startswith("RESULT"):
                r = json.loads(line[6:])
                out[r.pop("i")] = r
                if bar is not None:
                    bar.update(1)
        elif proc.poll() is not None:
            break
    proc.wait()
    if proc.returncode not in (0, None) and all("error" in r for r in out):
        err = (proc.stderr.read().strip().splitlines() or ["no output"])[-1]
        out = [{"error": err[:120]} for _ in cfgs]
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=positive_int, nargs="*", default=[64, 128, 256, 512, 1024, 2048, 4096],
                   help="points per cloud N")
    p.add_argument("--lifts", type=positive_int, nargs="*", default=[1, 4], help="lift samples K (SE2)")
    p.add_argument("--degree", type=positive_float, default=8.0,
                   help="mean base in-degree (self loop included); the radius is set to give exactly this")
    p.add_argument("--dim", type=positive_int, default=64)
    p.add_argument("--heads", type=positive_int, default=4)
    p.add_argument("--dense-max-nodes", type=positive_int, default=4096, help="skip dense above N K lifted nodes")
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads per run (on a machine shared with other work, 1 is often faster)")
    p.add_argument("--timeout", type=positive_float, default=1800, help="seconds per implementation's subprocess")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--skip-official", action="store_true")
    p.add_argument("--configs", nargs="*", default=None, metavar="NAME",
                   help="run only these official configurations, e.g. 'T2 32x32 d128 L4 all' (default: all)")
    p.add_argument("--compile", action="store_true",
                   help="also time the official configurations with every block under torch.compile")
    p.add_argument("--amp", action="store_true",
                   help="also time the official configurations under bfloat16 autocast")
    p.add_argument("--shared-kernel", action="store_true",
                   help="also time the official configurations with the library's default shared location "
                        "MLP (one output per head) instead of the official one MLP per head")
    p.add_argument("--torch-kernels", action="store_true",
                   help="also time the official configurations on torch's kernels instead of the native C "
                        "kernels (location MLP, CSR products)")
    p.add_argument("--dense-model", action="store_true",
                   help="also time the all-pairs official configurations computed densely, as the official "
                        "code does (the same model and parameters), in the same run")
    p.add_argument("--official-src", default=None, metavar="DIR",
                   help="also time the official implementation in this run, imported from DIR, which holds "
                        "the packages eqv_transformer (github.com/oxcsml/lie-transformer) and lie_conv "
                        "(github.com/MJHutchinson/LieConv); needs einops (see docs/lie_transformer.md)")
    p.add_argument("--out", default="runs/bench_lie_self_attention")


def _official_configs(threads: int, repeats: int) -> List[Dict]:
    c = dict(impl="model", threads=threads, repeats=repeats, heads=4)
    return [
        dict(c, name="T2 32x32 d128 L4 all", group="T2", K=1, N=32, clouds=32, dim=128, layers=4, degree=None),
        dict(c, name="SE2 K4 32x32 d128 L4 all", group="SE2", K=4, N=32, clouds=32, dim=128, layers=4,
             degree=None),
        *[dict(c, name=f"T2 N{n} d64 L2 all", group="T2", K=1, N=n, dim=64, layers=2, degree=None)
          for n in (512, 1024, 2048)],
        *[dict(c, name=f"SE2 K4 N{n} d64 L2 all", group="SE2", K=4, N=n, dim=64, layers=2, degree=None)
          for n in (128, 256, 512)],
        # 32 lifted neighbours on average: base in-degree 32 / K (self included)
        *[dict(c, name=f"T2 N{n} d64 L2 nbhd32", group="T2", K=1, N=n, dim=64, layers=2, degree=32.0)
          for n in (1024, 2048)],
        dict(c, name="SE2 K4 N512 d64 L2 nbhd32", group="SE2", K=4, N=512, dim=64, layers=2, degree=8.0),
    ]


def main(args) -> int:
    from tqdm import tqdm
    official_options = [name for name, given in (
        ("--configs", args.configs is not None), ("--compile", args.compile), ("--amp", args.amp),
        ("--shared-kernel", args.shared_kernel), ("--torch-kernels", args.torch_kernels),
        ("--dense-model", args.dense_model), ("--official-src", args.official_src is not None)) if given]
    if args.skip_official and official_options:
        raise SystemExit(f"{', '.join(official_options)} select(s) what runs on the official configurations, "
                         "which --skip-official skips; drop one or the other")
    if args.skip_official and args.skip_sweep:
        raise SystemExit("--skip-sweep and --skip-official leave nothing to run; drop one")
    os.makedirs(args.out, exist_ok=True)
    results = []
    jobs = []
    if not args.skip_sweep:
        for K in args.lifts:
            for n in args.sizes:
                for impl in SWEEP_IMPLS:
                    if impl == "dense" and n * K > args.dense_max_nodes:
                        continue
                    jobs.append(dict(impl=impl, group="SE2", K=K, N=n, dim=args.dim, heads=args.heads,
                                     degree=args.degree, threads=args.threads, repeats=args.repeats))
    if not args.skip_official:
        official = _official_configs(args.threads, args.repeats)
        if args.configs is not None:
            unknown = sorted(set(args.configs) - {c["name"] for c in official})
            if unknown:
                raise SystemExit(f"--configs: unknown configuration(s) {unknown}; choose from {sorted(OFFICIAL)}")
            official = [c for c in official if c["name"] in args.configs]
        jobs += official + [dict(c, impl="pointwise") for c in official]
        if args.compile:
            jobs += [dict(c, impl="model-compiled") for c in official]
        if args.amp:
            jobs += [dict(c, impl="model-bf16") for c in official]
        if args.shared_kernel:
            jobs += [dict(c, impl="model-shared") for c in official]
        if args.torch_kernels:
            jobs += [dict(c, impl="model-torch") for c in official]
        if args.dense_model:
            jobs += [dict(c, impl="model-dense") for c in official if c["degree"] is None]
        if args.official_src is not None:
            from .official_lie_transformer import check_source
            src = os.path.abspath(args.official_src)
            try:
                check_source(src)
            except ValueError as err:
                raise SystemExit(str(err))
            jobs += [dict(c, impl="official-code", official_src=src) for c in official]
    # The sweep: one subprocess per implementation, configurations in increasing size. The
    # official configurations: one subprocess per configuration and implementation, the
    # implementations of a configuration back to back, so that a host whose speed drifts
    # (these machines are shared) slows the sides of each ratio alike.
    names = [c["name"] for c in jobs if c["impl"] == "model"]
    order = ([c for c in jobs if c["impl"] in SWEEP_IMPLS]
             + sorted((c for c in jobs if c["impl"] not in SWEEP_IMPLS), key=lambda c: names.index(c["name"])))
    groups: Dict[object, List[Dict]] = {}
    for cfg in order:
        key = cfg["impl"] if cfg["impl"] in SWEEP_IMPLS else (cfg["name"], cfg["impl"])
        groups.setdefault(key, []).append(cfg)
    timed = ("time", "time_min")
    with tqdm(total=2 * len(jobs), desc="lie-self-attention bench", dynamic_ncols=True) as bar:
        for cfgs in groups.values():
            rt = _run_subprocess(cfgs, args.timeout, bar, memory=False)
            rm = _run_subprocess(cfgs, args.timeout, bar, memory=True)
            for cfg, t, m in zip(cfgs, rt, rm):
                r = {k: v for k, v in m.items() if k not in timed}
                r.update({k: t[k] for k in timed if k in t})
                if "time" not in t:
                    r.pop("mem_mb", None)
                    r.setdefault("error", t.get("error", "timing run failed"))
                results.append({**cfg, **r})
            with open(os.path.join(args.out, "results.json"), "w") as f:
                json.dump(results, f, indent=1)
    text = format_tables(results, args)
    print(text)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text + "\n")
    plot(results, os.path.join(args.out, "lie_self_attention_bench.png"))
    print(f"\nresults: {args.out}/results.json, results.md, lie_self_attention_bench.png")
    return 0


def _fmt_t(r):
    return f"{r['time'] * 1e3:.1f}" if "time" in r else r.get("error", "-")


def _span(lo: float, hi: float, fmt: str) -> str:
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}-{b}"


def _speedup(lo: float, hi: float, t: Optional[float]) -> str:
    """``official / t`` for both ends of the official figure, e.g. ``3.8-6.0x``."""
    if t is None:
        return "-"
    return _span(lo / t, hi / t, ".1f" if lo / t < 100 else ".0f") + "x"


def _fmt_m(r):
    return f"{r['mem_mb']:.0f}" if "mem_mb" in r else "-"


def format_tables(results: List[Dict], args) -> str:
    from . import host_description
    lines = [f"host: {host_description()}", "",
             f"threads={args.threads}, median of {args.repeats} (after a warm-up); memory = peak RSS growth "
             f"during forward+backward (MB), fresh subprocess per row", ""]
    sweep = [r for r in results if r["impl"] in SWEEP_IMPLS]
    if sweep:
        lines += ["### one LieSelfAttention layer (SE2, dim %d, %d heads, shared location MLP 16-16), forward+backward"
                  % (args.dim, args.heads), "",
                  "| K | N | lifted nodes | edges | sparse ms | sparse MB | dense ms | dense MB | "
                  "dense/sparse | TransformerConv ms | TransformerConv MB |", "|" + "---|" * 11]
        keys = sorted({(r["K"], r["N"]) for r in sweep})
        for K, n in keys:
            row = {r["impl"]: r for r in sweep if r["K"] == K and r["N"] == n}
            s, d, t = row.get("sparse", {}), row.get("dense", {}), row.get("transformerconv", {})
            ratio = f"{d['time'] / s['time']:.1f}x" if "time" in s and "time" in d else "-"
            lines.append(f"| {K} | {n} | {s.get('num_nodes', '-')} | {s.get('num_edges', '-')} | {_fmt_t(s)} | "
                         f"{_fmt_m(s)} | {_fmt_t(d)} | {_fmt_m(d)} | {ratio} | {_fmt_t(t)} | {_fmt_m(t)} |")
    off = [r for r in results if r["impl"] == "model"]
    floor = {r["name"]: r for r in results if r["impl"] == "pointwise"}
    variants = {impl: {r["name"]: r for r in results if r["impl"] == impl} for impl in MODEL_VARIANTS}
    variants = {impl: rows for impl, rows in variants.items() if rows}
    rates = sorted(r["peak_gflops"] for r in floor.values() if "peak_gflops" in r)
    peak = f"{rates[0]:.0f}-{rates[-1]:.0f}" if rates else "-"
    if off:
        lines += ["", "### full model (lift + edges + blocks + pool), forward+backward, vs the official code "
                  "(same run, 2 threads)", "",
                  "pointwise s: the model's per-node work alone (LayerNorms, projections, MLPs), which any "
                  "implementation does; official / pointwise bounds the possible speed-up. GFLOP: the blocks' "
                  "matrix products, forward + backward (per-node layers, location MLP on every edge, q.k "
                  "scores, weighted sums of v; `matmul_gflop`); at peak: that work at this CPU's best "
                  "measured fp32 matrix-product rate (%s GFLOP/s, square products of 512-2048); "
                  "official / at peak bounds the speed-up of any implementation whose products run no "
                  "faster than that; official code here / at peak is that bound against the official "
                  "code timed in this run." % peak
                  + "".join(f" {MODEL_VARIANTS[v][0]} s: {MODEL_VARIANTS[v][1]}" for v in variants), "",
                  "| configuration | edges | ours s | ours MB | official s | official GB | speed-up | "
                  "pointwise s | official / pointwise | GFLOP | at peak s | official / at peak |"
                  + "".join(f" {MODEL_VARIANTS[v][0]} s | {MODEL_VARIANTS[v][0]} / eager |"
                            + (f" {MODEL_VARIANTS[v][0]} MB |" if v in VARIANTS_WITH_MEMORY else "")
                            + (f" {MODEL_VARIANTS[v][0]} / at peak |" if v in VARIANTS_WITH_BOUND else "")
                            for v in variants),
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"
                  + "".join("---|---|" + "---|" * ((v in VARIANTS_WITH_MEMORY) + (v in VARIANTS_WITH_BOUND))
                            for v in variants)]
        for r in off:
            lo, hi, gb = OFFICIAL[r["name"]]
            ours = f"{r['time']:.3f}" if "time" in r else r.get("error", "-")
            f = floor.get(r["name"], {})
            fl = f"{f['time']:.3f}" if "time" in f else f.get("error", "-")
            cells = [r["name"], r.get("num_edges", "-"), ours, _fmt_m(r), _span(lo, hi, "g"), gb,
                     _speedup(lo, hi, r.get("time")), fl, _speedup(lo, hi, f.get("time"))]
            at_peak = f["gflop"] / f["peak_gflops"] if "gflop" in f else None
            if at_peak is not None:
                cells += [f"{f['gflop']:.2f}", f"{at_peak:.4f}", _speedup(lo, hi, at_peak)]
            else:
                cells += ["-", "-", "-"]
            for v, rows in variants.items():
                c = rows.get(r["name"], {})
                cells += [f"{c['time']:.3f}" if "time" in c else c.get("error", "-"),
                          f"{c['time'] / r['time']:.2f}" if "time" in c and "time" in r else "-"]
                if v in VARIANTS_WITH_MEMORY:
                    cells.append(_fmt_m(c))
                if v in VARIANTS_WITH_BOUND:
                    cells.append(f"{c['time'] / at_peak:.1f}x" if "time" in c and at_peak else "-")
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def plot(results: List[Dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sweep = [r for r in results if r["impl"] in SWEEP_IMPLS and "time" in r]
    if not sweep:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for impl in SWEEP_IMPLS:
        for K in sorted({r["K"] for r in sweep}):
            rs = sorted([r for r in sweep if r["impl"] == impl and r["K"] == K], key=lambda r: r["N"])
            if rs:
                a1.plot([r["N"] for r in rs], [r["time"] for r in rs], marker="o", label=f"{impl} K={K}")
                a2.plot([r["num_edges"] for r in rs], [max(r["mem_mb"], 0.1) for r in rs], marker="o",
                        label=f"{impl} K={K}")
    a1.set(xscale="log", yscale="log", xlabel="points per cloud N", ylabel="forward+backward (s)")
    a2.set(xscale="log", yscale="log", xlabel="lifted edges", ylabel="extra peak RSS (MB)")
    for a in (a1, a2):
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
