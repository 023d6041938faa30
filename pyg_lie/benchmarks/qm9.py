"""``pyg-lie bench qm9``: training throughput of the QM9 models on the same real batches.

One training step is forward + backward + an Adam step on a batch of real QM9 molecules
(drawn from the Cormorant training split with ``--seed``). Every model steps through the
same batches, and the models alternate within every round so that load from other
processes affects them alike; the median step time gives the throughput (molecules per
second). Peak memory is the extra memory of a training step: on CUDA
``torch.cuda.max_memory_allocated``, on the CPU the growth of the peak resident set of a
fresh process over its state just before a step, after a warm-up step (``--memory``, one
process per model).

Models (``--models``, default all of :data:`DEFAULT_MODELS`), written ``kind[:preset[:lift]]``:
the LieTransformer QM9 presets (:mod:`pyg_lie.experiments.qm9_models`: ``small``, ``cpu``,
``paper``) for T3 and SE3 with each lift (``haar``, ``finite``, ``grid``), the exact
finite-lift model on all lifted pairs of a molecule (``lie-SE3:cpu:finite-all``, what the
finite lift cost before the log-map neighbourhood), and PyG's ``schnet`` and
``dimenet++`` at their default hyperparameters. ``--amp bf16`` adds a bfloat16-autocast
row for every LieTransformer.

The result (``--out``; default ``runs/bench/qm9.json``, ``--out benchmarks/results/qm9.json``
for the committed table of ``docs/benchmarks.md``) holds the configuration, the git revision,
the class of machine and one record per model, with the two goals of the QM9 issue as ratios:
``throughput_vs_schnet`` (>= 1 wanted for every LieTransformer preset) and
``step_vs_T3`` (the SE3 step over the T3 step of the same preset; <= 3 wanted for the finite
lift).

Example::

    pyg-lie bench qm9 --threads 1 --memory
    pyg-lie bench qm9 --models lie-T3:cpu schnet --device cuda --batch-size 128
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Dict, List, Optional

import torch

from ..cli.types import device_name, nonnegative_int, positive_int

__all__ = ["DEFAULT_MODELS", "parse_spec", "add_arguments", "main", "run"]

#: molecules in an epoch of the Cormorant training split (``epoch_s`` = its training time at the measured rate)
EPOCH = 100_000

DEFAULT_MODELS = ("lie-T3:small", "lie-SE3:small:haar", "lie-T3:cpu", "lie-SE3:cpu:haar", "lie-SE3:cpu:finite",
                  "lie-SE3:cpu:grid", "lie-SE3:cpu:finite-all", "lie-T3:paper", "lie-SE3:paper:haar",
                  "schnet", "dimenet++")


def parse_spec(text: str) -> Dict[str, Optional[str]]:
    """``kind[:preset[:lift]]`` -> ``{"name", "kind", "preset", "lift", "all_pairs"}`` (argparse type)."""
    from ..experiments.qm9_models import MODEL_KINDS, PRESETS
    parts = text.split(":")
    kind = parts[0]
    if kind not in MODEL_KINDS or len(parts) > 3 or (not kind.startswith("lie") and len(parts) > 1):
        raise argparse.ArgumentTypeError(
            f"a model is kind[:preset[:lift]] with kind in {MODEL_KINDS} (preset and lift for lie-* only), "
            f"got {text!r}")
    preset = parts[1] if len(parts) > 1 else ("cpu" if kind.startswith("lie") else None)
    lift = parts[2] if len(parts) > 2 else ("haar" if kind == "lie-SE3" else None)
    if preset is not None and preset not in PRESETS:
        raise argparse.ArgumentTypeError(f"preset must be one of {sorted(PRESETS)}, got {preset!r} in {text!r}")
    all_pairs = lift == "finite-all"
    if all_pairs:
        lift = "finite"
    if lift is not None and (kind != "lie-SE3" or lift not in ("haar", "finite", "grid")):
        raise argparse.ArgumentTypeError(f"lift (haar, finite, grid, finite-all) is for lie-SE3 only, got {text!r}")
    name = kind if preset is None else f"{kind} {preset}" + (f" {parts[2]}" if lift else "")
    return {"name": name, "kind": kind, "preset": preset, "lift": lift, "all_pairs": all_pairs}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="data/QM9", help="QM9 root (built from qm9pack on first use)")
    p.add_argument("--models", nargs="+", type=parse_spec, default=None, metavar="MODEL",
                   help=f"kind[:preset[:lift]] (default: {' '.join(DEFAULT_MODELS)})")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--batches", type=positive_int, default=3, help="distinct real batches")
    p.add_argument("--rounds", type=positive_int, default=2,
                   help="timed passes over the batches (models alternate within each), after one warm-up step")
    p.add_argument("--amp", choices=["none", "bf16"], default="none",
                   help="bf16: also time every LieTransformer under bfloat16 autocast")
    p.add_argument("--memory", action="store_true",
                   help="on the CPU, measure each model's peak memory in a fresh process (slower)")
    p.add_argument("--threads", type=nonnegative_int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--device", type=device_name, default="cpu")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--sensitivity-molecules", type=nonnegative_int, default=256,
                   help="validation molecules for each model's relative rotation sensitivity (0: skip)")
    p.add_argument("--max-molecules", type=positive_int, default=None,
                   help="build/use only the first N molecules of QM9 (tests)")
    p.add_argument("--out", default="runs/bench/qm9.json", help="JSON file for the results")


def _batches(a):
    from torch_geometric.loader import DataLoader

    from ..datasets.qm9 import QM9Transform, cormorant_split
    from ..datasets.qm9_real import QM9
    ds = QM9(a.root, transform=QM9Transform("homo"), max_molecules=a.max_molecules)
    split = cormorant_split(len(ds), seed=0)
    train = split["train"]
    gen = torch.Generator().manual_seed(a.seed)
    pick = train[torch.randperm(len(train), generator=gen)[:a.batch_size * a.batches]]
    valid = ds[split["valid"][:getattr(a, "sensitivity_molecules", 0)]]
    return list(DataLoader(ds[pick], batch_size=a.batch_size)), QM9Transform("homo").num_features, valid


def _build(spec, in_channels: int):
    from ..experiments.qm9_models import build_model
    torch.manual_seed(0)
    overrides = {}
    if spec["all_pairs"]:  # the exact finite lift before the log-map neighbourhood: every lifted pair
        overrides = {"lift_neighbors": 10 ** 9, "max_neighbors": None}
    model, predict = build_model(spec["kind"], in_channels, spec["preset"] or "cpu", spec["lift"] or "haar",
                                 **overrides)
    return model, predict


class _Stepper:
    """One model, its optimizer and its training step."""

    def __init__(self, spec, in_channels, device, amp: bool):
        self.model, self.predict = _build(spec, in_channels)
        self.model.to(device).train()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.device, self.amp = torch.device(device), amp

    def step(self, batch) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            pred = self.predict(self.model, batch)
        loss = (pred.float() - batch.y.squeeze(-1)).abs().mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t


def _peak_rss_mb(spec, a, amp: bool) -> float:
    """Peak resident memory growth of one training step, in a fresh process (CPU)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_child_peak, (spec, vars(a), amp))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _child_peak(spec, args: dict, amp: bool) -> float:
    """Peak resident set during one training step over the resident set just before it (Linux:
    the peak is reset through ``/proc/self/clear_refs`` after the data set and model are loaded)."""
    a = argparse.Namespace(**args)
    if a.threads:
        torch.set_num_threads(a.threads)
    batches, in_channels, _ = _batches(a)
    stepper = _Stepper(spec, in_channels, "cpu", amp)
    stepper.step(batches[0])  # warm-up: kernels built, optimizer state allocated
    import gc
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    before = _status_kb("VmRSS")
    stepper.step(batches[-1])
    return (_status_kb("VmHWM") - before) / 1024.0


def run(a) -> List[Dict]:
    from ..experiments.qm9_models import count_parameters
    if a.threads:
        torch.set_num_threads(a.threads)
    batches, in_channels, valid = _batches(a)
    batches = [b.to(a.device) for b in batches]
    specs = list(a.models or [parse_spec(s) for s in DEFAULT_MODELS])
    rows, steppers = [], []
    for spec in specs:
        for amp in ([False, True] if a.amp == "bf16" and spec["kind"].startswith("lie") and not spec["all_pairs"]
                    else [False]):
            st = _Stepper(spec, in_channels, a.device, amp)
            steppers.append(st)
            rows.append({"model": spec["name"] + (" bf16" if amp else ""), "spec": spec, "amp": amp,
                         "params": count_parameters(st.model), "times": []})
    for st in steppers:  # warm-up (native kernels, allocator)
        st.step(batches[0])
        if a.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
    for _ in range(a.rounds):
        for b in batches:
            for row, st in zip(rows, steppers):
                if a.device.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats()
                row["times"].append(st.step(b))
                if a.device.startswith("cuda"):
                    row["peak_mem_mb"] = max(row.get("peak_mem_mb", 0.0), torch.cuda.max_memory_allocated() / 2 ** 20)
    molecules = statistics.mean(b.num_graphs for b in batches)
    for row in rows:
        med = statistics.median(row["times"])
        row["step_ms"] = 1000 * med
        row["molecules_per_s"] = molecules / med
        row["epoch_s"] = EPOCH / row["molecules_per_s"]
        if a.memory and not a.device.startswith("cuda"):
            row["peak_mem_mb"] = _peak_rss_mb(row["spec"], a, row["amp"])
    if len(valid):
        from torch_geometric.loader import DataLoader

        from ..experiments.qm9_models import rotation_sensitivity
        loader = DataLoader(valid, batch_size=a.batch_size)
        for row, st in zip(rows, steppers):
            if not row["amp"]:
                row["rotation_sensitivity_rel"] = rotation_sensitivity(st.model, st.predict, loader,
                                                                       device=a.device, relative=True)
    schnet = next((r for r in rows if r["spec"]["kind"] == "schnet"), None)
    for row in rows:
        spec = row["spec"]
        if schnet is not None and spec["kind"].startswith("lie"):
            row["throughput_vs_schnet"] = row["molecules_per_s"] / schnet["molecules_per_s"]
        if spec["kind"] == "lie-SE3":
            t3 = next((r for r in rows if r["spec"]["kind"] == "lie-T3" and r["spec"]["preset"] == spec["preset"]
                       and r["amp"] == row["amp"]), None)
            if t3 is not None:
                row["step_vs_T3"] = row["step_ms"] / t3["step_ms"]
    return rows


def main(a) -> int:
    from ..experiments.qm9_models import SE3_NEIGHBORS
    from ._record import write_benchmark

    rows = run(a)
    print(f"QM9 training steps: batch {a.batch_size}, {a.batches} batches x {a.rounds} rounds, {a.device}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'model':28s} {'params':>9s} {'step ms':>9s} {'mol/s':>8s} {'vs SchNet':>9s} {'vs T3':>6s} {'peak MB':>8s}"
          f" {'rot. sens.':>10s}")
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if r.get(key) is not None else "-"
        print(f"{r['model']:28s} {r['params']:9d} {r['step_ms']:9.1f} {r['molecules_per_s']:8.1f} "
              f"{f('throughput_vs_schnet', '9.2f'):>9s} {f('step_vs_T3', '6.2f'):>6s} {f('peak_mem_mb', '8.0f'):>8s}"
              f" {f('rotation_sensitivity_rel', '10.2e'):>10s}")
    config = {k: v for k, v in vars(a).items() if not k.startswith("_") and k not in ("command", "task", "out",
                                                                                      "models", "bench")}
    config["torch_threads"] = torch.get_num_threads()
    records = []
    for r in rows:
        spec = r["spec"]
        neighbourhood = None
        if spec["kind"] == "lie-SE3":
            neighbourhood = ("all lifted pairs" if spec["all_pairs"] else
                             f"{SE3_NEIGHBORS['nearest']} nearest" + (
                                 f", {SE3_NEIGHBORS['sample'][spec['lift']]} sampled"
                                 if SE3_NEIGHBORS["sample"][spec["lift"]] else ""))
        records.append({"configuration": {"model": r["model"], "neighbourhood": neighbourhood},
                        "metrics": {k: r.get(k) for k in ("params", "step_ms", "molecules_per_s", "epoch_s",
                                                          "throughput_vs_schnet", "step_vs_T3", "peak_mem_mb",
                                                          "rotation_sensitivity_rel")}})
    write_benchmark(a, ["bench", "qm9"], a.out, benchmark="qm9", title="QM9 training throughput",
                    description="Training steps (forward, backward, Adam) on the same real QM9 batches, models "
                                "alternating: median step time, molecules per second, the time of one epoch of the "
                                "100,000 training molecules at that rate (epoch_s), throughput relative to PyG's "
                                "SchNet at its defaults (throughput_vs_schnet) and, for SE3, the step time relative "
                                "to "
                                "T3 of the same preset (step_vs_T3); peak_mem_mb is the extra memory of a training "
                                "step; rotation_sensitivity_rel is the spread of a model's prediction over 8 random "
                                "rotations of a molecule relative to its spread across molecules, after the "
                                "benchmark's few training steps (0: exactly invariant). Presets: small (width 64, "
                                "2 layers), cpu (the paper's architecture at width 96, 6 layers), paper (width 848, "
                                "13 layers for T3, 30 for SE3); SE3 lifts: haar (2 samples), finite and grid (the "
                                "tetrahedral group, 12 elements).",
                    config=config, seed=a.seed, records=records,
                    units={"step_ms": "ms", "peak_mem_mb": "MiB", "epoch_s": "s"})
    return 0
