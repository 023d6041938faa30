"""scripts/springs_paper_metric.py: the paper's geometric-mean test loss in older springs result files."""
import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "results" / "springs"


def _script():
    spec = importlib.util.spec_from_file_location("springs_paper_metric", ROOT / "scripts" / "springs_paper_metric.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _curve(path):
    rows = path.read_text().splitlines()[1:]
    return [float(r.split(",")[2]) for r in rows]


def test_committed_springs_files_report_the_papers_definition():
    """Every committed run with a per-step curve has rollout_gmse_100 = exp(mean_t log mse_t) of its
    curve, the paper's number under the geometric-mean metric, and is what the script would write."""
    files = sorted(p for p in FOLDER.glob("*.json") if p.with_suffix(".rollout_error.csv").is_file())
    assert len(files) >= 10
    for path in files:
        rec = json.loads(path.read_text())
        mse = _curve(path.with_suffix(".rollout_error.csv"))
        expected = math.exp(sum(math.log(v) for v in mse) / len(mse))
        assert math.isclose(rec["metrics"]["rollout_gmse_100"], expected, rel_tol=1e-9), path.name
        assert rec["metrics"]["rollout_gmse_100"] < rec["metrics"]["rollout_mse_100"], path.name
        assert "test_mse_5" not in rec["paper"], path.name
    assert _script().main(["--check", "--folder", str(FOLDER)]) == 0


def test_script_converts_an_old_file_and_is_idempotent(tmp_path):
    mod = _script()
    run = "lie-T2-n200"
    rec = json.loads((FOLDER / f"{run}.json").read_text())
    # the file as the run wrote it: the geometric mean over systems and steps under rollout_gmse_100
    old = dict(rec, metrics={k: v for k, v in rec["metrics"].items() if k != "rollout_gmse_systems_100"},
               paper={"test_mse_5": 4.5e-7, "rollout_gmse_100": 7e-4})
    old["metrics"]["rollout_gmse_100"] = rec["metrics"]["rollout_gmse_systems_100"]
    old.pop("recomputed")
    (tmp_path / f"{run}.json").write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    shutil.copy(FOLDER / f"{run}.rollout_error.csv", tmp_path)
    assert mod.main(["--check", "--folder", str(tmp_path)]) == 1
    assert mod.main(["--folder", str(tmp_path)]) == 0
    new = json.loads((tmp_path / f"{run}.json").read_text())
    assert new == rec
    assert mod.main(["--check", "--folder", str(tmp_path)]) == 0
    # a curve that does not belong to the file is refused
    broken = dict(old, metrics=dict(old["metrics"], rollout_mse_100=1.0))
    with pytest.raises(ValueError, match="rollout_mse_100"):
        mod.updated(broken, FOLDER / f"{run}.rollout_error.csv")
