"""Put the paper's springs test loss into result files written before it was reported.

    python scripts/springs_paper_metric.py            # rewrite results/springs/*.json in place
    python scripts/springs_paper_metric.py --check    # exit 1 if a file would change

The LieTransformer paper (Appendix I.3) averages the per-step test losses over time steps
geometrically: ``exp(mean_t log mse_t)``, ``mse_t`` the state MSE of step ``t`` averaged over
test systems. `pyg-lie train springs` reports that as ``test_gmse_5`` and ``rollout_gmse_100``.
Earlier runs stored ``rollout_gmse_100`` as the geometric mean over systems *and* steps; their
per-step curve ``<run>.rollout_error.csv`` (column ``mse``: the per-step MSE averaged over
systems) holds what the paper's definition needs. For each such file this script

* moves the old value to ``rollout_gmse_systems_100`` (checked against the curve's ``gmse``
  column) and recomputes ``rollout_gmse_100`` from the curve's ``mse`` column (after checking
  that column against the file's ``rollout_mse_100``);
* files the paper's 5-step number under ``test_gmse_5`` (it is a geometric mean), whose value
  the old runs did not store (their per-step 5-step errors were not kept): the results page
  says "not stored" there;
* records what it did in the file's ``recomputed`` field.

It is idempotent: a file that already has the new fields is recomputed to the same values.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "results" / "springs"
NOTE = ("rollout_gmse_100 recomputed by scripts/springs_paper_metric.py from the mse column of "
        "<run>.rollout_error.csv (the paper's geometric mean over steps of the per-step MSE over systems); the "
        "run's geometric mean over systems and steps moved to rollout_gmse_systems_100; test_gmse_5 not stored "
        "(the run kept no per-step 5-step errors)")


def _curve(path: Path) -> "tuple[List[float], List[float]]":
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or set(rows[0]) != {"step", "gmse", "mse"}:
        raise ValueError(f"{path}: not a rollout-error curve (columns step,gmse,mse)")
    return [float(r["gmse"]) for r in rows], [float(r["mse"]) for r in rows]


def _geo(values: Sequence[float]) -> float:
    if any(v <= 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def updated(record: dict, curve: Path) -> dict:
    """``record`` with the paper's metric (see the module docstring); raises ``ValueError`` when
    the curve does not belong to the record."""
    gmse, mse = _curve(curve)
    metrics, paper = dict(record["metrics"]), dict(record.get("paper") or {})
    T = len(mse)
    key, old = f"rollout_gmse_{T}", f"rollout_gmse_systems_{T}"
    if f"rollout_mse_{T}" not in metrics:
        raise ValueError(f"{curve}: {T} steps, but the result file has no rollout_mse_{T}")
    arithmetic = sum(mse) / T
    if not math.isclose(arithmetic, metrics[f"rollout_mse_{T}"], rel_tol=1e-5):
        raise ValueError(f"{curve}: mean of the mse column {arithmetic:.6e} is not the file's rollout_mse_{T} "
                         f"{metrics[f'rollout_mse_{T}']:.6e}")
    if old not in metrics:
        if key not in metrics:
            raise ValueError(f"{curve}: the result file has neither {key} nor {old}")
        metrics[old] = metrics[key]
    if not math.isclose(_geo(gmse), metrics[old], rel_tol=1e-5):
        raise ValueError(f"{curve}: the gmse column gives {_geo(gmse):.6e}, the file's {old} is {metrics[old]:.6e}")
    metrics[key] = _geo(mse)
    if "test_mse_5" in paper:
        paper["test_gmse_5"] = paper.pop("test_mse_5")
    out = dict(record, metrics=dict(sorted(metrics.items())), paper=dict(sorted(paper.items())))
    if "test_gmse_5" not in metrics:
        out["recomputed"] = NOTE
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a file would change; change nothing")
    p.add_argument("--folder", default=str(FOLDER), help="the springs result files")
    args = p.parse_args(argv)
    stale = []
    for path in sorted(Path(args.folder).glob("*.json")):
        curve = path.with_suffix(".rollout_error.csv")
        if not curve.is_file():
            continue
        record = json.loads(path.read_text())
        text = json.dumps(updated(record, curve), indent=1, sort_keys=True) + "\n"
        if text != path.read_text():
            stale.append(path.name)
            if not args.check:
                path.write_text(text)
    verb = "would change" if args.check else "rewrote"
    print(f"{verb} {len(stale)} file(s)" + (f": {', '.join(stale)}" if stale else ""))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
