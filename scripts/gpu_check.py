"""GPU benchmarks of the pyg_lie.ops Triton kernels against the composite (pure torch) path.

Run by ``scripts/gpu_check.sh`` on a CUDA machine after the ``cuda`` tests; writes
``gpu_check.json`` and ``gpu_check.md`` (a markdown table) into ``--out``. Each case times
forward + backward (median over ``--repeats`` after warm-up, CUDA events) of:

* ``csr_attention``: the fused CSR softmax attention at SE(2) with 4 lifts, 8192 points
  (32768 lifted nodes), 32 neighbours a lifted node, 4 heads of 16 channels; neighbours are
  drawn from a window of nearby node ids, the locality of spatially sorted points;
* ``mlp_shared``: the location MLP ``3 -> 16 -> 16 -> 4`` (SiLU) on those 1M edges;
* ``mlp_headwise``: one ``3 -> 16 -> 16 -> 1`` MLP a head, 4 heads, same edges.

The "present path" column times what the layers run today: ``pyg_lie.nn.attention_core``'s
``csr_softmax_attention`` for the attention, the MLP module under autograd for the MLPs.

``--dry-run`` runs every case on CPU at a tiny size, with the Triton kernels under Triton's
interpreter (a test exercises it), so the script is known to work before a GPU is lent.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pyg_lie.ops as ops  # noqa: E402


def local_graph(n: int, degree: int, window: int, device, generator) -> tuple:
    """CSR pattern: every target has ``degree`` distinct sources among the ``window`` ids around it."""
    window = max(window, degree)
    offs = torch.rand(n, window, generator=generator).argsort(1)[:, :degree] - window // 2
    src = (torch.arange(n).unsqueeze(1) + offs).clamp(0, n - 1)
    src = torch.sort(src, 1).values.flatten()
    crow = torch.arange(0, n * degree + 1, degree)
    return crow.to(device), src.to(device)


def timer(device):
    if device.type == "cuda":
        def run(fn, repeats):
            times = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                res = fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            return statistics.median(times), res
    else:
        def run(fn, repeats):
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                res = fn()
                times.append(1e3 * (time.perf_counter() - t))
            return statistics.median(times), res
    return run


def measure(fn, device, repeats: int, warmup: int):
    """``(median ms, peak MiB or None, result)`` of ``fn`` (forward + backward)."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    ms, res = timer(device)(fn, max(1, repeats))
    peak = torch.cuda.max_memory_allocated() / 2 ** 20 if device.type == "cuda" else None
    return ms, peak, res


def attention_case(args, device, gen):
    n, degree, H, D = args.nodes, args.degree, args.heads, args.head_dim
    crow, col = local_graph(n, degree, args.window, device, gen)
    E = col.numel()
    q, k, v = (torch.randn(n, H, D, generator=gen).to(device).requires_grad_() for _ in range(3))
    l = torch.randn(H, E, generator=gen).to(device).requires_grad_()
    transpose = ops.transpose_csr(crow, col, n)
    go = torch.randn(n, H, D, generator=gen).to(device)

    def step(backend):
        def fn():
            with ops.backend(backend):
                out, w = ops.csr_attention(q, k, v, crow, col, l, transpose=transpose)
                grads = torch.autograd.grad(out, (q, k, v, l), go)
            return (out.detach(), *grads)
        return fn

    def current():  # the layers' present attention path (pyg_lie.nn.attention_core), for reference
        from pyg_lie.ops import CSRStructure
        from pyg_lie.nn.attention_core import csr_softmax_attention
        if not hasattr(current, "s"):
            rows = torch.repeat_interleave(torch.arange(n, device=device), crow[1:] - crow[:-1])
            current.s = CSRStructure.build(torch.stack([col, rows]), n, transpose=True)
        out, w = csr_softmax_attention(current.s, q, k, v, l)
        return (out.detach(), *torch.autograd.grad(out, (q, k, v, l), go))

    row = dict(name="csr_attention", size=f"N={n} targets, {degree} neighbours, E={E}, H={H}, D={D}")
    return row, step("composite"), step("triton"), current


def mlp_case(args, device, gen, headwise: bool):
    n = args.nodes * args.degree
    x = torch.randn(n, 3, generator=gen).to(device).requires_grad_()
    if headwise:
        from pyg_lie.nn._edge_mlp import HeadwiseMLP
        module = HeadwiseMLP(3, args.mlp_width, args.heads, 3).to(device)
        shape = f"E={n}, {args.heads} heads x (3-{args.mlp_width}-{args.mlp_width}-1)"
    else:
        w = args.mlp_width
        module = torch.nn.Sequential(torch.nn.Linear(3, w), torch.nn.SiLU(), torch.nn.Linear(w, w), torch.nn.SiLU(),
                                     torch.nn.Linear(w, args.heads)).to(device)
        shape = f"E={n}, 3-{w}-{w}-{args.heads}"
    params = list(module.parameters())
    go = torch.randn(n, args.heads, generator=gen).to(device)

    def step(backend):
        def fn():
            with ops.backend(backend):
                y = ops.edge_mlp(module, x)
                grads = torch.autograd.grad(y, [x, *params], go)
            return (y.detach(), *grads)
        return fn

    def plain():
        y = module(x)
        return (y.detach(), *torch.autograd.grad(y, [x, *params], go))

    row = dict(name="mlp_headwise" if headwise else "mlp_shared", size=shape)
    return row, step("composite"), step("triton"), plain


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"), help="folder for the JSON and table")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on CPU, Triton under its interpreter")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--nodes", type=int, default=32768, help="lifted nodes (8192 points x 4 lifts)")
    p.add_argument("--degree", type=int, default=32)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--mlp-width", type=int, default=16)
    p.add_argument("--budget-s", type=float, default=300.0, help="skip the remaining cases after this long")
    args = p.parse_args(argv)
    if args.dry_run:
        args.nodes, args.degree, args.window, args.repeats = 16, 3, 6, 1
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --dry-run for the CPU check", file=sys.stderr)
            return 2
        device = torch.device("cuda")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    warmup = 0 if args.dry_run else 3
    t0 = time.perf_counter()
    results = []
    cases = [lambda: attention_case(args, device, gen), lambda: mlp_case(args, device, gen, False),
             lambda: mlp_case(args, device, gen, True)]
    for make in cases:
        if time.perf_counter() - t0 > args.budget_s:
            print("time budget spent: remaining cases skipped", flush=True)
            break
        row, composite, triton_fn, plain = make()
        c_ms, c_mem, c_res = measure(composite, device, args.repeats, warmup)
        ops.reset_dispatch_counts()
        t_ms, t_mem, t_res = measure(triton_fn, device, args.repeats, warmup)
        counts = ops.dispatch_counts()
        ran_triton = bool(counts) and all(k[1] == "triton" for k in counts)
        diff = max(float((a.double() - b.double()).abs().max()) for a, b in zip(c_res, t_res))
        row.update(composite_ms=c_ms, triton_ms=t_ms, speedup=c_ms / t_ms, composite_peak_mib=c_mem,
                   triton_peak_mib=t_mem, max_abs_diff=diff, triton_ran=ran_triton,
                   dispatch={f"{k[0]}/{k[1]}": v for k, v in counts.items()})
        if plain is not None:
            try:
                m_ms, m_mem, _ = measure(plain, device, args.repeats, warmup)
                row.update(module_ms=m_ms, module_peak_mib=m_mem)
            except Exception as err:  # noqa: BLE001 - a reference column must not stop the run
                row.update(module_error=f"{type(err).__name__}: {err}"[:500])
        results.append(row)
        print(json.dumps(row), flush=True)
    info = dict(dry_run=args.dry_run, device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                torch=torch.__version__, python=platform.python_version(), results=results,
                elapsed_s=time.perf_counter() - t0)
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    (out / "gpu_check.json").write_text(json.dumps(info, indent=2))
    lines = [f"device: {info['device']}, torch {info['torch']}, triton {info['triton']}; forward + backward, "
             f"median of {args.repeats}", "",
             "| case | size | composite ms | triton ms | speedup | present path ms | peak MiB (comp / triton) "
             "| max abs diff |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        mod = f"{r['module_ms']:.3f}" if "module_ms" in r else "-"
        mem = (f"{r['composite_peak_mib']:.0f} / {r['triton_peak_mib']:.0f}" if r["composite_peak_mib"] is not None
               else "-")
        lines.append(f"| {r['name']} | {r['size']} | {r['composite_ms']:.3f} | {r['triton_ms']:.3f} | "
                     f"{r['speedup']:.2f}x | {mod} | {mem} | {r['max_abs_diff']:.2e} |")
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
