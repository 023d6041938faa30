"""Time the LieTransformer of two source trees alternately on official benchmark configurations.

    python scripts/bench_before_after.py BEFORE_TREE AFTER_TREE [--alternations 4] [--repeats 9]

Each tree is a checkout of this repository (for instance a ``git worktree`` of an older
revision). Every alternation runs one process per tree, each timing the model's
forward+backward on every configuration (``run_config`` of
``pyg_lie.benchmarks.lie_self_attention``, one thread) and keeping the fastest of ``--repeats``;
the record is the median over alternations. Writes
``benchmarks/results/lie_transformer_before_after.json`` (``--out``), which
``scripts/benchmarks_table.py`` turns into a section of docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from pyg_lie.experiments.results import host_class

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("T2 32x32 d128 L4 all", "T2 N1024 d64 L2 nbhd32", "SE2 K4 N512 d64 L2 nbhd32")
CHILD = """
import json, sys
from pyg_lie.benchmarks.lie_self_attention import _official_configs, run_config
cfgs = {c["name"]: c for c in _official_configs(1, int(sys.argv[1]))}
print(json.dumps({n: run_config(cfgs[n])["time_min"] for n in sys.argv[2:]}))
"""


def _revision(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def _run(tree: Path, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, str(repeats), *CONFIGS], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--alternations", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lie_transformer_before_after.json")
    args = ap.parse_args(argv)
    times = {"before": [], "after": []}
    for i in range(args.alternations):
        for label in ("before", "after"):
            times[label].append(_run(getattr(args, label), args.repeats))
            print(f"alternation {i + 1}/{args.alternations} {label}: {times[label][-1]}", flush=True)
    records = []
    for name in CONFIGS:
        m = {f"{label}.min_ms": round(1000 * statistics.median(t[name] for t in times[label]), 2)
             for label in ("before", "after")}
        m["after_over_before"] = round(m["after.min_ms"] / m["before.min_ms"], 3)
        records.append({"configuration": {"name": name, "threads": 1, "repeats": args.repeats,
                                          "alternations": args.alternations}, "metrics": m})
    result = {
        "title": "LieTransformer forward+backward, two revisions alternately",
        "description": "The model alone on official benchmark configurations: the fastest of the repeats "
                       "per process, median over alternating processes per revision, one thread.",
        "command": f"python scripts/bench_before_after.py BEFORE AFTER --alternations {args.alternations} "
                   f"--repeats {args.repeats}",
        "host_class": host_class(),
        "git_revision": {"before": _revision(args.before), "after": _revision(args.after)},
        "records": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
