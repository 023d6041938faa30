"""Results as data: write_result's fields and scripts/results_table.py (docs/results.md)."""
from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest

from pyg_lie.experiments.results import REQUIRED_FIELDS, load_result, read_results, setting_text, write_result

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("results_table", ROOT / "scripts" / "results_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_results_md_is_up_to_date(capsys):
    assert _script().main(["--check"]) == 0, capsys.readouterr().out


def _write(root, experiment="exp", run="r1", git_dirty=False, **kw):
    """write_result's file, marked as recorded from a clean tree unless ``git_dirty`` (the
    tests run in any checkout)."""
    args = dict(config={"lr": 1e-3, "path": Path("a/b")}, seed=3, metrics={"acc": 0.5}, wall_time_s=1.23456,
                paper={"acc": 0.75}, setting="paper", command=["pyg-lie", "train", "x", "--lr", "1e-3"],
                out_dir=str(root))
    args.update(kw)
    path = write_result(experiment, run, **args)
    rec = json.loads(path.read_text())
    if rec.get("git_revision") is not None:
        rec["git_dirty"] = git_dirty
        path.write_text(json.dumps(rec))
    return path


def test_write_result_fields(tmp_path):
    path = _write(tmp_path, metrics={"acc": 0.5, "nan": float("nan"), "inf": float("inf"), "none": None, "n": 7})
    assert path == tmp_path / "exp" / "r1.json"
    rec = json.loads(path.read_text())
    assert set(REQUIRED_FIELDS) <= set(rec)
    assert rec["git_revision"] is None or re.fullmatch(r"[0-9a-f]{40}", rec["git_revision"])
    assert rec["git_dirty"] in (None, True, False) and (rec["git_dirty"] is None) == (rec["git_revision"] is None)
    assert rec["metrics"] == {"acc": 0.5, "nan": None, "inf": None, "none": None, "n": 7.0}  # non-finite -> null
    assert rec["paper"] == {"acc": 0.75} and rec["seed"] == 3 and rec["wall_time_s"] == 1.235
    assert rec["config"] == {"lr": 1e-3, "path": "a/b"} and rec["command"] == "pyg-lie train x --lr 1e-3"
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert not re.search(r"\d{4}-\d\d-\d\d", path.read_text())  # no dates
    assert load_result(tmp_path, "exp")["run"] == "r1"
    assert read_results(str(tmp_path)) == {"exp": {"r1": rec}}


def test_write_result_outside_a_checkout(tmp_path, monkeypatch):
    import pyg_lie.experiments.results as results
    monkeypatch.setattr(results, "git_revision", lambda cwd=None: (None, None))
    rec = json.loads(_write(tmp_path).read_text())
    assert rec["git_revision"] is None and rec["git_dirty"] is None


@pytest.mark.parametrize("kw, match", [
    (dict(run="../up"), "run must be a plain file name"),
    (dict(experiment="a b"), "experiment must be a plain file name"),
    (dict(metrics={"acc": "high"}), "metric 'acc' must be a number"),
])
def test_write_result_rejects_bad_input(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        _write(tmp_path, **kw)


def test_load_result_names_missing_fields(tmp_path):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "r.json").write_text(json.dumps({"experiment": "exp"}))
    with pytest.raises(ValueError, match="lacks"):
        load_result(tmp_path, "exp", "r")


def test_setting_text():
    assert setting_text({"a": 1, "b": [0.5, 0.9]}, {"a": 1, "b": (0.5, 0.9)}) == "paper"
    assert setting_text({"n_train": 10, "a": 1}, {"n_train": 100, "a": 1}, ["3 epochs"]) == \
        "scaled down: n-train 10 (paper 100); 3 epochs"


def test_table_from_a_results_folder(tmp_path):
    mod = _script()
    root = tmp_path / "results"
    # written in reverse order: the page must not depend on the order of the files
    _write(root, "zeta", "K16", metrics={"err": 2e-5}, paper={}, setting="scaled down: n 3 (paper 9)")
    _write(root, "zeta", "K2", metrics={"err": 0.25, "err_std": 0.0125, "loss": math.nan}, paper={"err": 0.3})
    _write(root, "alpha", "run", metrics={"acc": 0.8123}, paper={"acc": 0.75, "exact": 0.5},
           command=["pyg-lie", "train", "x", "--note", "a|b"])
    (root / "alpha" / "run.curve.png").write_bytes(b"png")
    text = mod.render(root)
    assert text == mod.render(root)
    assert text.index("## alpha") < text.index("## zeta") and text.index("| K2 |") < text.index("| K16 |")
    assert "| run | acc | 0.75 | 0.812 | paper | `pyg-lie train x --note a\\|b` |" in text
    assert "|  | exact | 0.5 | - |  |  |" in text  # a paper number we have no value for
    assert "| K2 | err | 0.3 | 0.25 ± 0.0125 | paper |" in text and "| loss |  | - |" in text
    assert "| K16 | err |  | 2.00e-05 | scaled down: n 3 (paper 9) |" in text
    assert "Plots: `results/alpha/run.curve.png`." in text
    assert str(tmp_path) not in text and not re.search(r"\d{4}-\d\d-\d\d", text)
    out = tmp_path / "results.md"
    assert mod.main(["--results", str(root), "--out", str(out), "--check"]) == 1
    assert mod.main(["--results", str(root), "--out", str(out)]) == 0
    assert out.read_text() == text
    assert mod.main(["--results", str(root), "--out", str(out), "--check"]) == 0
    _write(root, "alpha", "run", metrics={"acc": 0.9})
    assert mod.main(["--results", str(root), "--out", str(out), "--check"]) == 1


def test_table_refuses_absolute_paths(tmp_path):
    mod = _script()
    _write(tmp_path, command=["pyg-lie", "train", "x", "--out", "/tmp/somewhere"])
    with pytest.raises(ValueError, match="absolute paths"):
        mod.render(tmp_path)


def test_shortfalls_list_accuracies_below_and_errors_above_the_paper(tmp_path):
    mod = _script()
    _write(tmp_path, "exp", "a", metrics={"acc": 0.70, "pose_error": 0.004, "params": 5},
           paper={"acc": 0.75, "pose_error": 0.003, "params": 36, "other_acc": 0.9}, setting="scaled down: n 1")
    _write(tmp_path, "exp", "b", metrics={"acc": 0.74, "pose_error": 0.01}, paper={"acc": 0.75, "pose_error": 0.003})
    text = mod.render(tmp_path).split("## Where ours falls short of the paper")[1]
    assert "| exp | a | acc | 0.7 < 0.75 | scaled down: n 1 |" in text
    assert "| exp | b | pose_error | 0.01 > 3.00e-03 | the paper |" in text
    assert "| a | pose_error" not in text and "| b | acc" not in text and "params" not in text
    assert "other_acc" not in text  # no value of ours: not judged


def test_constellation_grid_views(tmp_path):
    """Table 1 as grids: the paper's setting (x_i = 1, official data, 10000 clouds, 150 epochs,
    whatever the run's name; repeats ``-seed<k>`` folded into mean ± std) and the smaller-budget
    extension (the other table1-* runs), rows in model / augmentation order, paper numbers
    in brackets."""
    mod = _script()
    root = tmp_path / "results"
    paper = dict(features="constant", data="official", num_train=10000, epochs=150)
    cells = [("settransformer", "SE2", "none"), ("lietransformer", "SE2", "T2"), ("lietransformer", "T2", "none"),
             ("lietransformer", "T2", "SE2")]
    for i, (model, group, aug) in enumerate(cells):
        name = "Set" if model == "settransformer" else group
        for kind, extra in (("x1", paper), ("dist", dict(features="pairwise_distances", data="official",
                                                          num_train=3000, epochs=10))):
            _write(root, "constellation", f"table1-{kind}-{name}-train-{aug}",
                   config={"model": model, "group": group, "augment": aug, **extra},
                   metrics={"test_acc": 0.5 + i / 10, "test_T2_acc": 0.25, "test_SE2_acc": 0.125},
                   paper={"test_SE2_acc": 0.63} if (group, aug) == ("T2", "none") and model != "settransformer" else {})
    _write(root, "constellation", "table1-x1-T2-train-SE2-seed1",
           config={"model": "lietransformer", "group": "T2", "augment": "SE2", **paper},
           metrics={"test_acc": 0.6, "test_T2_acc": 0.25, "test_SE2_acc": 0.125})
    _write(root, "constellation", "other-run", config={"model": "lietransformer", "group": "T2", "augment": "none"})
    text = mod.render(root)

    def grid(title):
        g = text[text.index(title):]
        g = g[:g.index("\n###", 1)] if "\n###" in g[1:] else g
        g = g[:g.index("\n## ")] if "\n## " in g else g
        return [ln for ln in g.splitlines() if ln.startswith("| ") and "model" not in ln]
    assert grid("### Table 1 in the paper's setting") == [
        "| LieTransformer-T2 | D_train | 0.7 | 0.25 | 0.125 (0.63) | not stored | table1-x1-T2-train-none |",
        "| LieTransformer-T2 | D_train^SE2 | 0.7 ± 0.141 (n=2) | 0.25 ± 0 (n=2) | 0.125 ± 0 (n=2) | not stored | "
        "table1-x1-T2-train-SE2 (+1 seeds) |",
        "| LieTransformer-SE2 | D_train^T2 | 0.6 | 0.25 | 0.125 | not stored | table1-x1-SE2-train-T2 |",
        "| SetTransformer | D_train | 0.5 | 0.25 | 0.125 | not stored | table1-x1-Set-train-none |",
    ]
    assert grid("### Table 1 at a smaller budget") == [
        "| LieTransformer-T2 | D_train | 0.7 | 0.25 | 0.125 (0.63) | not stored | table1-dist-T2-train-none |",
        "| LieTransformer-T2 | D_train^SE2 | 0.8 | 0.25 | 0.125 | not stored | table1-dist-T2-train-SE2 |",
        "| LieTransformer-SE2 | D_train^T2 | 0.6 | 0.25 | 0.125 | not stored | table1-dist-SE2-train-T2 |",
        "| SetTransformer | D_train | 0.5 | 0.25 | 0.125 | not stored | table1-dist-Set-train-none |",
    ]
    _write(root / "x", "zeta", "table1-a")  # no grid for experiments without one
    assert "###" not in mod.render(root / "x")


def test_springs_grid_view(tmp_path):
    """Springs as a grid: one row per run, by training budget (sizes in numeric order), then method."""
    mod = _script()
    root = tmp_path / "results"
    runs = [("lie-T2-n1000", "lie", 1000, 69, 20113), ("gn-n200", "gn", 200, 77, 25857),
            ("fc-n1000", "fc", 1000, 69, 71851), ("lie-T2-n200", "lie", 200, 77, 20113)]
    for run, potential, n, epochs, params in runs:
        stored = {"test_gmse_5": 4e-4} if n == 1000 else {}  # runs before the paper's metric lack it
        _write(root, "springs", run, config={"potential": potential, "group": "T2", "n_train": n, "lr": 0.003},
               metrics={"test_mse_5": 1e-3, "rollout_gmse_100": 2e-3, "energy_drift_100": 0.5,
                        "epochs": epochs, "params": params, **stored},
               paper={"test_gmse_5": 4.5e-7} if potential == "lie" else {})
    text = mod.render(root)
    grid = text[text.index("### Methods x training budget"):]
    grid = grid[:grid.index("\n## ")]
    lines = [ln for ln in grid.splitlines() if ln.startswith("| ") and "potential" not in ln]
    assert lines == [
        "| 200 systems, 77 epochs, lr 0.003 | GN (26k parameters) | not stored | 1.00e-03 | 2.00e-03 | 0.5 | gn-n200 |",
        "| 200 systems, 77 epochs, lr 0.003 | LieTransformer-T2 (20k parameters) | not stored (4.50e-07) | 1.00e-03 "
        "| 2.00e-03 | 0.5 | lie-T2-n200 |",
        "| 1000 systems, 69 epochs, lr 0.003 | FC (72k parameters) | 4.00e-04 | 1.00e-03 | 2.00e-03 | 0.5 | fc-n1000 |",
        "| 1000 systems, 69 epochs, lr 0.003 | LieTransformer-T2 (20k parameters) | 4.00e-04 (4.50e-07) | 1.00e-03 "
        "| 2.00e-03 | 0.5 | lie-T2-n1000 |",
    ]


def test_rows_recorded_from_a_dirty_tree_say_so(tmp_path):
    """A result file with git_dirty true gets a warning in its setting cell; a clean one none."""
    mod = _script()
    root = tmp_path / "results"
    for run, dirty in (("dirty-run", True), ("clean-run", False)):
        path = _write(root, "vit", run, setting="scaled down", git_dirty=dirty)
        rec = json.loads(path.read_text())
        rec.update(git_dirty=dirty, git_revision="abcdef0123456789")
        path.write_text(json.dumps(rec))
    text = mod.render(root)
    dirty = next(ln for ln in text.splitlines() if ln.startswith("| dirty-run"))
    clean = next(ln for ln in text.splitlines() if ln.startswith("| clean-run"))
    assert "uncommitted changes on abcdef0" in dirty and "uncommitted" not in clean
