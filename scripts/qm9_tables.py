"""Write the generated tables of docs/qm9.md from the committed QM9 results.

    python scripts/qm9_tables.py            # (re)write the tables in docs/qm9.md
    python scripts/qm9_tables.py --check    # exit 1 if they are out of date

Two tables, each between its markers ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->``:

* ``groups``: every model of ``benchmarks/results/qm9.json`` (``pyg-lie bench qm9``): what it
  is invariant to, its relative rotation sensitivity, the time of one epoch on one thread, its
  step time relative to T3 and its throughput relative to SchNet;
* ``budget``: every run of ``results/qm9-budget/`` (``pyg-lie train qm9-budget``): test MAE,
  rotation sensitivity, steps and epochs within the budget, and the validation MAE when the
  run had seen as many molecules as SchNet saw in its whole budget (sample efficiency).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts' shared helper
from _generated import write_or_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "qm9.md"
BENCH = ROOT / "benchmarks" / "results" / "qm9.json"
BUDGET = ROOT / "results" / "qm9-budget"

#: what each model is invariant to, by kind or SE3 lift
INVARIANCE = {
    "lie-T3": "translations exactly; rotations not at all (learnt only with `--augment so3`)",
    "haar": "translations exactly; rotations in distribution (random lift)",
    "finite": "translations and the 12 rotations of the tetrahedral group exactly; other rotations nearly",
    "grid": "translations exactly; rotations in distribution (stratified random lift)",
    "finite-all": "as `finite`, attending to every lifted atom (the exact model before the log-map neighbourhood)",
    "schnet": "rotations, reflections and translations exactly (distances)",
    "dimenet++": "rotations, reflections and translations exactly (distances and angles)",
}


def _num(v: Optional[float], digits: int = 3) -> str:
    if v is None:
        return "-"
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.1e}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def groups_table(bench: Dict) -> List[str]:
    lines = ["| model | parameters | invariant to | rotation sensitivity (relative) | epoch (s) | step vs T3 | "
             "throughput vs SchNet |", "|---|---:|---|---:|---:|---:|---:|"]
    for rec in bench.get("records", []):
        name, m = rec["configuration"]["model"], rec["metrics"]
        if name.endswith(" bf16"):
            continue
        words = name.split()
        kind = words[-1] if words[0] == "lie-SE3" else words[0]
        lines.append(f"| {name} | {m['params']} | {INVARIANCE.get(kind, '')} | "
                     f"{_num(m.get('rotation_sensitivity_rel'), 2)} | {_num(m.get('epoch_s'))} | "
                     f"{_num(m.get('step_vs_T3'))} | {_num(m.get('throughput_vs_schnet'))} |")
    bf16 = [(r["configuration"]["model"], r["metrics"]) for r in bench.get("records", [])
            if r["configuration"]["model"].endswith(" bf16")]
    if bf16:
        plain = {r["configuration"]["model"]: r["metrics"] for r in bench["records"]}
        pairs = ", ".join(f"{n[:-5]} {_num(plain[n[:-5]]['step_ms'] / m['step_ms'], 2)}x" for n, m in bf16
                          if n[:-5] in plain)
        lines += ["", f"bfloat16 autocast on the CPU, speed-up of a training step over float32: {pairs}."]
    return lines


def _mae_at(curve: List[Dict], key: str, molecules: float) -> Optional[float]:
    """The validation MAE of the first curve point that had seen at least ``molecules``."""
    for point in curve:
        if point["molecules"] >= molecules:
            return point[key]
    return None


def budget_table(folder: Path) -> List[str]:
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not runs:
        return ["No runs of `pyg-lie train qm9-budget` are committed yet."]
    lines = ["| target | model | parameters | test MAE | rotation sensitivity | steps | epochs | "
             "final validation MAE | validation MAE at SchNet's molecules |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    by_target: Dict[str, List[Dict]] = {}
    for r in runs:
        by_target.setdefault(r["config"]["target"], []).append(r)
    for target in sorted(by_target):
        group = by_target[target]
        schnet = next((r for r in group if r["config"]["model"] == "schnet"), None)
        for r in sorted(group, key=lambda r: r["run"]):
            m = r["metrics"]
            unit = next(k[len("test_mae_"):] for k in m if k.startswith("test_mae_"))
            at = None
            if schnet is not None and r is not schnet and r["curve"]:
                at = _mae_at(r["curve"], f"valid_mae_{unit}", schnet["curve"][-1]["molecules"])
            lines.append(f"| {target} ({unit}) | {r['run'][len(target) + 1:]} | {m['parameters']:.0f} | "
                         f"{_num(m[f'test_mae_{unit}'])} | {_num(m.get(f'rotation_sensitivity_{unit}'))} | "
                         f"{m['steps']:.0f} | {_num(m['epochs'], 2)} | "
                         f"{_num(r['curve'][-1][f'valid_mae_{unit}'] if r['curve'] else None)} | {_num(at)} |")
    minutes = {r["config"]["minutes"] for r in runs}
    clocks = {r["config"]["clock"] for r in runs}
    lines += ["", f"Budget: {', '.join(f'{x:g}' for x in sorted(minutes))} min of {', '.join(sorted(clocks))} time "
              f"per model (one thread). The last column is the validation MAE of the first point of the run's "
              f"curve that had seen as many molecules as SchNet saw in its whole budget."]
    return lines


def render(text: str, tables: Dict[str, List[str]]) -> str:
    for name, lines in tables.items():
        pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{TARGET}: no markers <!-- generated: {name} --> ... <!-- end: {name} -->")
        text = pattern.sub(lambda mt: mt.group(1) + "\n".join(lines) + "\n" + mt.group(2), text)
    return text


def main(argv: Sequence[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the tables are out of date")
    args = ap.parse_args(argv)
    bench = json.loads(BENCH.read_text()) if BENCH.is_file() else {}
    text = render(TARGET.read_text(), {"groups": groups_table(bench), "budget": budget_table(BUDGET)})
    return write_or_check(text, TARGET, args.check, "scripts/qm9_tables.py")


if __name__ == "__main__":
    sys.exit(main())
